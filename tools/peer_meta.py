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


def peer_command():
    """The command line as run, from the repository root: `cd DIR && ...`
    when the script ran in another folder (make golden-retinanet runs
    golden.py and blend.py in the images' folder)."""
    import os
    import sys
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cwd = os.path.relpath(os.getcwd(), root)
    script = os.path.relpath(os.path.abspath(sys.argv[0]), os.getcwd())
    cmd = " ".join([sys.executable, script] + sys.argv[1:])
    return cmd if cwd == "." else "cd %s && %s" % (cwd, cmd)
