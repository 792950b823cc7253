"""The public measurement sets and their readers (kernel tables, layers, whole models), and the one fit/held-out split rule."""
