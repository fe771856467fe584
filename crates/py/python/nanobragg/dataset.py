"""Datasets (`nanobragg dataset SPEC.toml`) from Python, one process or many.

    import nanobragg.dataset
    nanobragg.dataset.run("set.toml")                        # every shot, this process

    from mpi4py import MPI                                   # under mpirun / srun
    nanobragg.dataset.run("set.toml", comm=MPI.COMM_WORLD)   # rank r renders shard r

The spec's format and the files written are those of the command (docs/dataset.md):
shot i's image depends only on the spec and i, so a dataset split among ranks,
shards or resumed runs holds the same images as one rendered in one process.
"""

from . import _nanobragg
from ._nanobragg import Error

__all__ = ["run"]


def run(spec, comm=None, shard=None, resume=False, threads=None, device="cpu", progress=False):
    """Renders the dataset `spec` (path of a SPEC.toml).

    comm: an mpi4py communicator: rank r of size K renders shard r of K, and every rank
        returns every rank's account (gathered with `allgather`).
    shard: (i, K) without `comm`: shard i of K (shots i, i + K, ...); by default a Slurm
        job array's task (SLURM_ARRAY_TASK_ID), else every shot.
    resume: render only the shots that no file in the output folder holds.
    threads, device: as the command's `-threads` and `-device`.

    Returns a list of dicts, one per worker: worker, todo, shots, written, lost, photons,
    seconds, error (None when the worker wrote all its shots). Raises `nanobragg.Error`
    when a worker lost shots, naming them.
    """
    if comm is not None and shard is not None:
        raise ValueError("give comm or shard, not both: with comm, rank r renders shard r")
    if comm is not None:
        i, k = comm.Get_rank(), comm.Get_size()
    elif shard is not None:
        i, k = shard
    else:
        i, k = None, None  # a Slurm job array's task, else every shot
    try:
        account = _nanobragg.dataset_worker(str(spec), i, k, resume, threads, device, progress)
    except BaseException as e:
        if comm is None:
            raise
        # every rank still reaches allgather: the others would wait for this one
        account = {"worker": i, "todo": 0, "shots": [], "written": [], "lost": [],
                   "photons": 0.0, "seconds": 0.0, "error": f"{type(e).__name__}: {e}"}
    accounts = comm.allgather(account) if comm is not None else [account]
    failed = [a for a in accounts if a["error"]]
    if failed:
        raise Error("; ".join(
            f"worker {a['worker']} lost shots {a['lost']} ({a['error']}): run again with "
            "resume=True" for a in failed))
    return accounts
