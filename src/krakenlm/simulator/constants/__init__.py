"""What a query reads: fitted GPU kernel constants, template constants and software profiles."""
