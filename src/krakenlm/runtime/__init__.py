"""Below training, evaluation, interop and distributed: the process bootstrap (torchrun's
environment, device, threads, process group), precision, and checkpoints with their tokenizer."""
