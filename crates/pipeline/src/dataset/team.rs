//! The workers of a dataset: the ranks of an MPI job (the `mpi` feature),
//! the shards of a job array (`-shard i/K`, `SLURM_ARRAY_TASK_ID`), or both.
//! Worker `w` of `W = shards · ranks` is rank `r` of shard `s`:
//! `w = s + shards · r`, unique whatever the ranks of each shard, and it
//! renders shots w, w + W, w + 2W, ...

use anyhow::{anyhow, bail, Result};

/// This process's place among the dataset's workers.
pub struct Team {
    /// This shard (0-based) and the number of shards.
    pub shard: (u64, u64),
    /// This rank in its shard's MPI job and the job's size (0 of 1 without MPI).
    pub rank: usize,
    /// Ranks in the MPI job.
    pub ranks: usize,
    #[cfg(feature = "mpi")]
    mpi: Option<Mpi>,
}

#[cfg(feature = "mpi")]
struct Mpi {
    world: mpi::topology::SimpleCommunicator,
    // finalizes MPI when dropped, after `world`
    _universe: mpi::environment::Universe,
}

/// Ranks in the job when an MPI launcher started this process (Open MPI,
/// MPICH/Hydra and Slurm's PMI and PMIx set these), `Some(0)` where the
/// launcher's rank is set but not the size.
fn launcher_size() -> Option<usize> {
    let var = |v: &str| std::env::var(v).ok();
    let size = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_STEP_NUM_TASKS"]
        .iter()
        .find_map(|v| var(v)?.parse().ok());
    let launched =
        ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE"]
            .iter()
            .any(|v| var(v).is_some());
    launched.then_some(size.unwrap_or(0))
}

/// This process's index among the launcher's processes on its node (Open
/// MPI, MPICH, Slurm), 0 without a launcher: the GPU it renders on.
pub fn local_rank() -> usize {
    ["OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.parse().ok())
        .unwrap_or(0)
}

/// `-shard i/K` as given, else the job array's task (`SLURM_ARRAY_TASK_ID`
/// from `SLURM_ARRAY_TASK_MIN`, of `SLURM_ARRAY_TASK_COUNT`), else 0 of 1.
pub fn shard_from(flag: Option<&str>) -> Result<(u64, u64)> {
    let parse = |s: &str| -> Option<(u64, u64)> {
        let (i, k) = s.split_once('/')?;
        Some((i.trim().parse().ok()?, k.trim().parse().ok()?))
    };
    let (i, k) = match flag {
        Some(s) => parse(s).ok_or_else(|| anyhow!("-shard {s}: expected i/K, e.g. 0/4"))?,
        None => match std::env::var("SLURM_ARRAY_TASK_ID") {
            Ok(id) => {
                let num = |v: &str| std::env::var(v).ok().and_then(|s| s.parse::<u64>().ok());
                let (Ok(id), Some(count)) = (id.parse::<u64>(), num("SLURM_ARRAY_TASK_COUNT"))
                else {
                    bail!("SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT: expected numbers");
                };
                // tasks min, min + step, ... (a list of ids has no step: -shard)
                let (min, step) = (
                    num("SLURM_ARRAY_TASK_MIN").unwrap_or(0),
                    num("SLURM_ARRAY_TASK_STEP").unwrap_or(1).max(1),
                );
                if id < min || (id - min) % step != 0 {
                    bail!(
                        "SLURM_ARRAY_TASK_ID {id} is not task MIN + k·STEP of the job array: \
                         give -shard i/K"
                    );
                }
                ((id - min) / step, count)
            }
            Err(_) => (0, 1),
        },
    };
    if k == 0 || i >= k {
        bail!("-shard {i}/{k}: the shard is 0 to K-1 of K >= 1");
    }
    Ok((i, k))
}

impl Team {
    /// Joins the MPI job where a launcher started this process (refused
    /// without the `mpi` feature when the job has more than one rank: every
    /// rank would render every shot).
    pub fn join(shard: (u64, u64)) -> Result<Team> {
        let size = launcher_size();
        #[cfg(feature = "mpi")]
        if size.is_some() {
            use mpi::traits::Communicator;
            // rayon's threads render; MPI is called from the main thread only
            let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Funneled)
                .ok_or_else(|| anyhow!("dataset: MPI could not be initialised"))?;
            let world = universe.world();
            let (rank, ranks) = (world.rank() as usize, world.size() as usize);
            let mpi = Some(Mpi { world, _universe: universe });
            return Ok(Team { shard, rank, ranks, mpi });
        }
        if let Some(n) = size.filter(|&n| n > 1) {
            bail!(
                "dataset: started by an MPI launcher with {n} ranks, but this nanobragg was built \
                 without MPI (every rank would render every shot): build it with `--features mpi`, \
                 or run the ranks as shards (-shard i/K)"
            );
        }
        Team::solo(shard)
    }

    /// This worker's index among all workers, and their number.
    pub fn worker(&self) -> (u64, u64) {
        (self.worker_of(self.rank), self.shard.1 * self.ranks as u64)
    }

    /// The worker index of rank `rank` of this shard.
    pub fn worker_of(&self, rank: usize) -> u64 {
        self.shard.0 + self.shard.1 * rank as u64
    }

    /// `e`, or where other ranks would wait for this one in a collective
    /// call, the end of the MPI job: the error printed, every rank stopped.
    pub fn fail(&self, e: anyhow::Error) -> anyhow::Error {
        #[cfg(feature = "mpi")]
        if let Some(m) = &self.mpi {
            if self.ranks > 1 {
                use mpi::traits::Communicator;
                eprintln!("error: rank {} of {}: {e:#}", self.rank, self.ranks);
                m.world.abort(1);
            }
        }
        e
    }

    /// A team of one process: shard `shard`, no MPI (a caller that
    /// distributes the shards itself, as Python through mpi4py does).
    pub fn solo(shard: (u64, u64)) -> Result<Team> {
        if shard.1 == 0 || shard.0 >= shard.1 {
            bail!("shard {}/{}: the shard is 0 to K-1 of K >= 1", shard.0, shard.1);
        }
        Ok(Team {
            shard,
            rank: 0,
            ranks: 1,
            #[cfg(feature = "mpi")]
            mpi: None,
        })
    }

    /// What `on_root` gives on rank 0, on every rank (its error too: the
    /// other ranks then fail without waiting for a message that will not
    /// come).
    pub fn broadcast_result(&self, on_root: impl FnOnce() -> Result<Vec<u64>>) -> Result<Vec<u64>> {
        #[cfg(feature = "mpi")]
        if let Some(m) = &self.mpi {
            use mpi::traits::{Communicator, Root};
            let root = m.world.process_at_rank(0);
            let mine = if self.rank == 0 { Some(on_root()) } else { None };
            // [0, values...] or [1] for an error
            let mut buf = match &mine {
                Some(Ok(v)) => std::iter::once(0).chain(v.iter().copied()).collect(),
                Some(Err(_)) => vec![1],
                None => Vec::new(),
            };
            let mut len = buf.len() as u64;
            root.broadcast_into(&mut len);
            buf.resize(len as usize, 0);
            root.broadcast_into(&mut buf[..]);
            return match mine {
                Some(r) => r,
                None if buf[0] == 0 => Ok(buf[1..].to_vec()),
                None => Err(anyhow!("dataset: rank 0 stopped (see its message)")),
            };
        }
        on_root()
    }

    /// Every rank's `row`, on rank 0 (`None` on the others).
    pub fn gather<const N: usize>(&self, row: [f64; N]) -> Option<Vec<[f64; N]>> {
        #[cfg(feature = "mpi")]
        if let Some(m) = &self.mpi {
            use mpi::traits::{Communicator, Root};
            let root = m.world.process_at_rank(0);
            if self.rank != 0 {
                root.gather_into(&row[..]);
                return None;
            }
            let mut all = vec![0.0f64; N * self.ranks];
            root.gather_into_root(&row[..], &mut all[..]);
            return Some(all.chunks(N).map(|c| c.try_into().expect("N values")).collect());
        }
        Some(vec![row])
    }
}
