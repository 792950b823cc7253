"""The LLMCompass hardware template's tile models: any device described by a hardware YAML."""
