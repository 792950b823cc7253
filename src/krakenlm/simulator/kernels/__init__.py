"""Kernel models: what one kernel costs on a device (template tile models and GPU models fitted on measured kernels)."""
