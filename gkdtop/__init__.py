"""gkdtop: a terminal dashboard for distributed training jobs (Ray + PyTorch + NCCL)."""

__version__ = "0.1.0"
