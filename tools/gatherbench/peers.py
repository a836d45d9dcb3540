#!/usr/bin/python3
"""Peer baselines for canopy's gather benchmark.

Measures how long the Python/DeepForest way of gathering validation
predictions across ranks takes, for comparison with canopy's compact
binary buffer + MPI_Allgatherv.

Each rank deterministically builds its half of the boxes as a pandas
DataFrame shaped like DeepForest's predictions (image_path, xmin, ymin,
xmax, ymax, label, score, geometry) and then measures, each repetition
starting after a barrier:

  (a) torch.distributed (gloo) all_gather_object(out, df) + pd.concat
  (b) mpi4py comm.allgather(df) + pd.concat

The time of a repetition is the maximum over ranks of (end - start),
i.e. until every rank holds the merged frame.

Run under mpirun, e.g. (see README.md / run.sh):
  mpirun --allow-run-as-root --oversubscribe -np 2 \
      /usr/bin/python3 peers.py --boxes 1000000 --out result.json
"""

import argparse
import io
import json
import os
import pickle
import platform
import socket
import statistics
import sys
import time

# mpi4py first: it initialises MPI (needed to agree on a port for torch).
from mpi4py import MPI  # noqa: E402

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import shapely  # noqa: E402
import shapely.geometry  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

IMAGE_FMT = "2019_SITE_3_123000_4567000_image_{:04d}.tif"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--boxes", type=int, default=1_000_000,
                   help="total boxes over all ranks (default 1000000)")
    p.add_argument("--images-per-rank", type=int, default=1000,
                   help="images per rank (default 1000)")
    p.add_argument("--reps", type=int, default=3,
                   help="timed repetitions per method (default 3)")
    p.add_argument("--warmup", type=int, default=1,
                   help="untimed full-size repetitions before timing (default 1)")
    p.add_argument("--seed", type=int, default=20190,
                   help="base seed; rank r uses seed + r")
    p.add_argument("--port", type=int, default=0,
                   help="MASTER_PORT for torch (default: a free port chosen by rank 0)")
    p.add_argument("--methods", default="torch,mpi4py",
                   help="comma-separated methods, in run order (default torch,mpi4py)")
    p.add_argument("--out", default=None, help="JSON result file (written by rank 0)")
    return p.parse_args()


def make_frame(rank, world, total_boxes, images_per_rank, seed):
    """Build this rank's share of boxes, deterministic in (seed, rank)."""
    rng = np.random.default_rng(seed + rank)
    # Split total boxes over ranks as evenly as possible.
    base, extra = divmod(total_boxes, world)
    n = base + (1 if rank < extra else 0)
    # Spread this rank's boxes over its images as evenly as possible.
    ib, ie = divmod(n, images_per_rank)
    counts = np.full(images_per_rank, ib, dtype=np.int64)
    counts[:ie] += 1
    first_image = rank * images_per_rank
    names = np.array([IMAGE_FMT.format(first_image + j) for j in range(images_per_rank)],
                     dtype=object)
    image_path = np.repeat(names, counts)

    xmin = rng.uniform(0.0, 380.0, n).astype(np.float32)
    ymin = rng.uniform(0.0, 380.0, n).astype(np.float32)
    w = rng.uniform(1.0, 20.0, n).astype(np.float32)
    h = rng.uniform(1.0, 20.0, n).astype(np.float32)
    xmax = np.minimum(xmin + w, np.float32(399.0)).astype(np.float32)
    ymax = np.minimum(ymin + h, np.float32(399.0)).astype(np.float32)
    label = np.zeros(n, dtype=np.int64)
    score = rng.uniform(0.0, 1.0, n).astype(np.float32)
    score = np.clip(score, np.float32(1e-6), np.float32(1 - 1e-6)).astype(np.float32)

    assert np.all(xmax > xmin) and np.all(ymax > ymin)
    assert np.all(xmin >= 0) and np.all(xmax < 400) and np.all(ymax < 400)

    if hasattr(shapely, "box"):  # shapely >= 2.0: vectorised
        geometry = shapely.box(xmin, ymin, xmax, ymax)
    else:  # shapely 1.8
        box = shapely.geometry.box
        geometry = [box(a, b, c, d) for a, b, c, d in
                    zip(xmin.tolist(), ymin.tolist(), xmax.tolist(), ymax.tolist())]

    df = pd.DataFrame({
        "image_path": image_path,
        "xmin": xmin, "ymin": ymin, "xmax": xmax, "ymax": ymax,
        "label": label,
        "score": score,
    })
    df["geometry"] = geometry
    return df


def torch_pickled_size(obj):
    """Size of the byte tensor torch's all_gather_object builds for obj."""
    # torch.distributed.distributed_c10d._object_to_tensor uses
    # pickle.Pickler(f).dump(obj), i.e. pickle.DEFAULT_PROTOCOL.
    f = io.BytesIO()
    pickle.Pickler(f).dump(obj)
    return len(f.getvalue())


def timed(comm, fn):
    """Barrier, run fn, return (max elapsed over ranks, local elapsed, result)."""
    comm.Barrier()
    t0 = time.perf_counter()
    res = fn()
    dt = time.perf_counter() - t0
    return comm.allreduce(dt, op=MPI.MAX), dt, res


def main():
    args = parse_args()
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    world = comm.Get_size()

    # torch.distributed init from env, rank/size from Open MPI.
    os.environ["RANK"] = os.environ.get("OMPI_COMM_WORLD_RANK", str(rank))
    os.environ["WORLD_SIZE"] = os.environ.get("OMPI_COMM_WORLD_SIZE", str(world))
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    port = args.port
    if port == 0 and rank == 0:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
    port = comm.bcast(port, root=0)
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group(backend="gloo", init_method="env://")
    assert dist.get_rank() == rank and dist.get_world_size() == world

    t_build = time.perf_counter()
    df = make_frame(rank, world, args.boxes, args.images_per_rank, args.seed)
    t_build = time.perf_counter() - t_build
    n_local = len(df)
    n_total = comm.allreduce(n_local)
    assert n_total == args.boxes

    # Bytes.
    torch_size = torch_pickled_size(df)
    mpi_size = len(pickle.dumps(df, protocol=MPI.pickle.PROTOCOL))
    torch_sizes = comm.allgather(torch_size)
    mpi_sizes = comm.allgather(mpi_size)
    torch_max = max(torch_sizes)
    # all_gather_object: sizes all_gather (world * int64) + padded payload
    # all_gather (world * max_size); this is what each rank receives.
    torch_moved_per_rank = world * torch_max + world * 8
    mpi_moved_per_rank = sum(mpi_sizes)

    expected_first = IMAGE_FMT.format(0)
    expected_last = IMAGE_FMT.format(world * args.images_per_rank - 1)

    def check(merged):
        assert len(merged) == n_total, (len(merged), n_total)
        assert merged["image_path"].iat[0] == expected_first
        assert merged["image_path"].iat[-1] == expected_last

    def run_torch():
        out = [None] * world
        dist.all_gather_object(out, df)
        return pd.concat(out, ignore_index=True)

    def run_mpi():
        out = comm.allgather(df)
        return pd.concat(out, ignore_index=True)

    methods = {"torch": ("torch_all_gather_object", run_torch),
               "mpi4py": ("mpi4py_allgather", run_mpi)}
    results = {}
    loadavg = {"start": os.getloadavg()}
    for key in args.methods.split(","):
        name, fn = methods[key.strip()]
        for _ in range(args.warmup):
            _, _, merged = timed(comm, fn)
            check(merged)
            del merged
        secs, local = [], []
        for _ in range(args.reps):
            tmax, tloc, merged = timed(comm, fn)
            check(merged)
            del merged
            secs.append(tmax)
            local.append(comm.gather(tloc, root=0))
        loadavg["after_" + name] = os.getloadavg()
        results[name] = {"seconds_median": statistics.median(secs),
                         "seconds_all": secs,
                         "seconds_per_rank": local}
        if rank == 0:
            print(f"{name}: median {statistics.median(secs):.4f} s  all "
                  + " ".join(f"{s:.4f}" for s in secs), flush=True)

    for name, _ in methods.values():
        results.setdefault(name, {})
    results["torch_all_gather_object"].update({
        "pickle_protocol": pickle.DEFAULT_PROTOCOL,
        "bytes_per_rank": torch_sizes,
        "bytes_per_box": sum(torch_sizes) / n_total,
        "bytes_moved_per_rank_received": torch_moved_per_rank,
        "bytes_moved_per_box": torch_moved_per_rank / n_total,
        "bytes_moved_note": "each rank receives world_size * max_size (payload padded "
                            "to the max pickled size) + world_size * 8 (int64 sizes)",
    })
    results["mpi4py_allgather"].update({
        "pickle_protocol": MPI.pickle.PROTOCOL,
        "bytes_per_rank": mpi_sizes,
        "bytes_per_box": sum(mpi_sizes) / n_total,
        "bytes_moved_per_rank_received": mpi_moved_per_rank,
        "bytes_moved_per_box": mpi_moved_per_rank / n_total,
    })

    boxes_per_rank = comm.gather(n_local, root=0)
    dist.barrier()
    dist.destroy_process_group()

    if rank == 0:
        cmd = os.environ.get("GATHERBENCH_COMMAND") or (
            f"mpirun -np {world} {sys.executable} " + " ".join(sys.argv))
        doc = {
            "peer": "DeepForest-style DataFrame gather: torch.distributed(gloo) "
                    "all_gather_object vs mpi4py allgather, each + pd.concat",
            "versions": {
                "torch": torch.__version__,
                "mpi4py": __import__("mpi4py").__version__,
                "pandas": pd.__version__,
                "shapely": shapely.__version__,
                "numpy": np.__version__,
                "python": platform.python_version(),
                "mpi": MPI.Get_library_version().replace("\x00", "").strip().splitlines()[0],
            },
            "command": cmd,
            "boxes": n_total,
            "ranks": world,
            "images_per_rank": args.images_per_rank,
            "boxes_per_rank": boxes_per_rank,
            "reps": args.reps,
            "warmup": args.warmup,
            "timing": "each repetition starts after MPI barrier; time = max over "
                      "ranks of (gather + pd.concat) until every rank holds the "
                      "merged frame",
            "host": {"cpus": os.cpu_count(), "machine": platform.machine(),
                     "system": platform.platform()},
            "build_seconds_rank0": t_build,
            "loadavg_1_5_15": loadavg,
            "methods_order": args.methods,
            "torch_all_gather_object": results["torch_all_gather_object"],
            "mpi4py_allgather": results["mpi4py_allgather"],
        }
        txt = json.dumps(doc, indent=2)
        if args.out:
            with open(args.out, "w") as f:
                f.write(txt + "\n")
        print(txt, flush=True)


if __name__ == "__main__":
    main()
