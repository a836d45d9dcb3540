"""The torch facts every fixture records (common brief): torch and
torchvision versions, the CPU capability and the thread count; empty when
torch is not installed."""


def torch_meta():
    try:
        import torch
        import torchvision
    except ImportError:
        return {}
    return {"torch": torch.__version__, "torchvision": torchvision.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "threads": torch.get_num_threads()}
