//! `nanobragg dataset SPEC.toml`: many shots of one experiment, each drawn
//! from the spec's distributions (orientation, crystal size, mosaicity,
//! fluence, spectrum, background) and rendered with noise and the detector
//! response, written as NXmx files, one per worker.
//!
//! Shot i depends only on the spec and i ([`shot::draw`]): not on how many
//! workers (MPI ranks, `-shard`s) or threads render the dataset. Worker w of
//! W renders shots w, w + W, ...; `-resume` renders only the shots no file
//! in the output folder holds yet.

pub mod shot;
pub mod spec;
pub mod team;

use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use nanobragg_core::config::{Misset, SimConfig};
use nanobragg_core::geometry::PanelLayout;
use nanobragg_core::noise_stream::{NoiseStream, PixelStream};
use nanobragg_core::response::{noisy_image, noisy_image_parallel, Response, SharedSeeds};
use nanobragg_core::rng::NoiseRng;
use nanobragg_core::setup::Plan;
use nanobragg_core::Experiment;
use nanobragg_io::image_writer;
use nanobragg_io::shot_record::ShotRecord;

use crate::detector_response::NOISIFY_CALIB_IDUM;
use crate::invocation::Invocation;
use crate::render::{check_finite_image, render_plan};
use shot::ShotDraw;
pub use spec::DatasetSpec;
use team::Team;

/// Flags of the shared model that write files of their own or render
/// something other than one image: a dataset writes its files itself.
const NOT_IN_A_DATASET: [&str; 16] = [
    "-images",
    "-shard",
    "-resume",
    "-floatfile",
    "-intfile",
    "-noisefile",
    "-pgmfile",
    "-nxmxfile",
    "-cbffile",
    "-batch",
    "-gradient",
    "-gradfile",
    "-curvatures",
    "-curvatures_mixed",
    "-printout",
    "-printout_pixel",
];

/// A dataset ready to render: the spec and its shared model.
pub struct Dataset {
    /// The spec.
    pub spec: DatasetSpec,
    /// The shared model (the spec's `args`).
    pub inv: Invocation,
    /// The spectrum files' lines (`model = "files"`).
    spectra: Vec<Vec<[f64; 2]>>,
    /// Shot 0's plans, one per panel: the detector and experiment every
    /// file's header describes (the draws change neither).
    header: Vec<Plan>,
    /// The detector response of the noise (`None`: Poisson noise alone).
    response: Option<Response>,
}

/// One shot rendered: its values and each panel's images.
pub struct Shot {
    /// What was drawn and what came out (photons).
    pub record: ShotRecord,
    /// int32 counts per panel (noise and detector response applied).
    pub pixels: Vec<Vec<i32>>,
    /// Photons per pixel before noise, per panel.
    pub noiseless: Vec<Vec<f32>>,
}

impl Dataset {
    /// The dataset of `spec`; `extra`: flags that apply to every shot on top
    /// of the spec's (`-threads`, `-device`).
    pub fn new(spec: DatasetSpec, extra: &[String]) -> Result<Dataset> {
        // (any spelling of the flags)
        let refused = spec.args.iter().find_map(|a| {
            let flag = crate::flags::FLAGS.iter().find(|f| f.spellings().any(|n| n == a))?;
            NOT_IN_A_DATASET.contains(&flag.name).then_some((a, flag.name))
        });
        if let Some((given, name)) = refused {
            let also = if given == name { String::new() } else { format!(" ({name})") };
            if ["-shard", "-resume"].contains(&name) {
                bail!(
                    "dataset {}: {given}{also} in args: give it on the command line (nanobragg dataset SPEC {name} ...)",
                    spec.path.display()
                );
            }
            bail!(
                "dataset {}: {given}{also} is not a dataset's flag: a dataset writes its shots \
                 to NXmx files named by `output` and `name`",
                spec.path.display()
            );
        }
        let mut args = spec.args.clone();
        args.extend_from_slice(extra);
        let mut inv = crate::parse_args(&args)
            .map_err(|e| anyhow!("dataset {}: args: {e}", spec.path.display()))?;
        // (a dataset's noise is drawn in parallel unless the args say c)
        if !spec.args.iter().any(|a| a == "-noise_rng") {
            inv.outputs.noise_rng = NoiseStream::Parallel;
        }
        if inv.help {
            bail!("dataset {}: args: -h is not a model", spec.path.display());
        }
        if let Some((path, n)) = &inv.expt_shots {
            bail!(
                "dataset {}: args: -expt {} holds {n} experiments; a dataset's model is one (its shots are drawn from the spec)",
                spec.path.display(),
                path.display()
            );
        }
        if inv.series.images > 1 {
            bail!(
                "dataset {}: args: the -expt scan of {} images is a rotation series, not a dataset's model (render it with the command line)",
                spec.path.display(),
                inv.series.images
            );
        }
        let spectra = match &spec.spectrum {
            Some(spec::Spectrum::Files { files }) => files
                .iter()
                .map(|p| {
                    nanobragg_core::source::spectrum::read_spectrum_file(p)
                        .map_err(|e| anyhow!("dataset {}: [spectrum] {e}", spec.path.display()))
                })
                .collect::<Result<_>>()?,
            _ => Vec::new(),
        };
        let mut set = Dataset { spec, inv, spectra, header: Vec::new(), response: None };
        // the model's own errors (geometry, files, response) before any shot
        set.header = set.experiment(&set.config(&set.draw(0)))?.plans;
        let pixel_m = set.header[0].detector.pixel_size_m;
        set.response = crate::detector_response::response(&set.inv.outputs, pixel_m)?;
        Ok(set)
    }

    /// The digest of the spec and the noise stream (its version included):
    /// a resumed run does not take files of another spec, nor of another
    /// stream, for its own.
    pub fn digest(&self) -> String {
        let stream = self.inv.outputs.noise_rng.label();
        spec::digest(&format!("{}\nnoise_rng: {stream}", self.spec.text))
    }

    /// Shot `i`'s draws.
    pub fn draw(&self, i: u64) -> ShotDraw {
        shot::draw(&self.spec, i, self.inv.config.beam.lambda_a, &self.spectra)
    }

    /// The model of one shot: the shared model with the shot's draws.
    pub fn config(&self, d: &ShotDraw) -> SimConfig {
        let mut c = self.inv.config.clone();
        if let Some(a) = d.misset_deg {
            c.crystal.misset = Misset::Angles(a);
        }
        if let Some(n) = d.n_cells {
            (c.crystal.na, c.crystal.nb, c.crystal.nc) = (n, n, n);
            // a crystal size in args would take precedence over the cells
            c.crystal.size_mm = [0.0; 3];
        }
        if let Some(um) = d.size_um {
            c.crystal.size_mm = [um / 1e3; 3];
        }
        if let Some(m) = d.mosaic_deg {
            c.crystal.mosaic_deg = m;
        }
        c.crystal.mosaic_seed = d.mosaic_seed;
        // a flux sets the fluence through exposure and beam size
        if c.beam.flux != 0.0 {
            c.beam.flux *= d.fluence_factor;
        } else {
            c.beam.fluence *= d.fluence_factor;
        }
        if let Some(s) = &d.spectrum {
            c.beam.spectrum = Some(s.clone());
        }
        if let Some(w) = d.water_um {
            c.sampling.water_um = w;
        }
        c
    }

    /// A shot's model, planned: every panel of its detector. Absent seeds
    /// are 1, not the clock: every rank and resumed run draws the same.
    fn experiment(&self, c: &SimConfig) -> Result<Experiment> {
        let seeds = crate::render::seeds_of(c, None, 1).setup;
        crate::panels::experiment(&self.inv, c, seeds, None)
    }

    /// Renders shot `i`: the float image of every panel, then noise and the
    /// detector response in panel order from the shot's noise seed.
    pub fn render(&self, i: u64) -> Result<Shot> {
        let d = self.draw(i);
        let config = self.config(&d);
        let exp = self.experiment(&config)?;
        let plans = &exp.plans;
        let mut noiseless = Vec::with_capacity(plans.len());
        for plan in plans {
            let (image, _) = render_plan(&self.inv, plan)?;
            check_finite_image(&image, &self.inv, plan)?;
            noiseless.push(image);
        }
        let o = &self.inv.outputs;
        let mut photons = 0.0;
        let pixels: Vec<Vec<i32>> = if !o.calculate_noise {
            // -nonoise: photons rounded, times -scale where given, plus -adc
            let scale = if o.int_scale > 0.0 { o.int_scale } else { 1.0 };
            photons = noiseless.iter().flatten().map(|&v| v as f64).sum();
            (plans.iter().zip(&noiseless))
                .map(|(p, img)| {
                    let dd = &p.detector;
                    nanobragg_io::pgm::int_image_i32(
                        img,
                        dd.fpixels,
                        dd.spixels,
                        dd.roi,
                        scale,
                        o.adc_offset,
                    )
                })
                .collect()
        } else if o.noise_rng == NoiseStream::Parallel {
            // each panel's pixels numbered after the panels before it
            let mut first = 0u64;
            let seed = d.noise_seed;
            (plans.iter().zip(&noiseless))
                .map(|(p, img)| {
                    let dd = &p.detector;
                    let at = first;
                    first += (dd.fpixels * dd.spixels) as u64;
                    match &self.response {
                        None => {
                            let (noise, wide) = nanobragg_core::noise::noise_image_parallel(
                                img,
                                dd.fpixels,
                                dd.spixels,
                                dd.roi,
                                o.adc_offset,
                                PixelStream { seed, first_pixel: at },
                                true,
                            );
                            photons += noise.photons;
                            wide
                        }
                        Some(r) => {
                            let calib = o.response.calib_seed.unwrap_or(-NOISIFY_CALIB_IDUM);
                            let tile = PanelLayout::whole(dd.fpixels, dd.spixels);
                            let stream = PixelStream { seed, first_pixel: at };
                            let n = noisy_image_parallel(img, &tile, r, stream, calib);
                            photons += n.photons;
                            n.pixels32.iter().map(|&v| v as i32).collect()
                        }
                    }
                })
                .collect()
        } else {
            match &self.response {
                None => {
                    let mut rng = NoiseRng::new(-d.noise_seed);
                    (plans.iter().zip(&noiseless))
                        .map(|(p, img)| {
                            let dd = &p.detector;
                            let (noise, wide) = nanobragg_core::noise::noise_image_wide(
                                img,
                                dd.fpixels,
                                dd.spixels,
                                dd.roi,
                                o.adc_offset,
                                &mut rng,
                                true,
                            );
                            photons += noise.photons;
                            wide
                        })
                        .collect()
                }
                Some(r) => {
                    let calib = o.response.calib_seed.map_or(NOISIFY_CALIB_IDUM, |s| -s);
                    let mut seeds = SharedSeeds::new(-d.noise_seed, calib);
                    (plans.iter().zip(&noiseless))
                        .map(|(p, img)| {
                            let dd = &p.detector;
                            let n = noisy_image(img, dd.fpixels, dd.spixels, r, &mut seeds);
                            photons += n.photons;
                            n.pixels32.iter().map(|&v| v as i32).collect()
                        })
                        .collect()
                }
            }
        };
        let p0 = &plans[0];
        // the shot's spectrum, else the args' (-spectrum, or the sources'
        // wavelengths), weights summing to 1
        let mut spectrum_a: Vec<(f64, f64)> =
            match d.spectrum.as_ref().or(self.inv.config.beam.spectrum.as_ref()) {
                Some(lines) => lines.iter().map(|l| (l[0], l[1])).collect(),
                None => crate::image_headers::plan_spectrum(p0),
            };
        let total: f64 = spectrum_a.iter().map(|l| l.1).sum();
        if total > 0.0 {
            spectrum_a.iter_mut().for_each(|l| l.1 /= total);
        }
        let record = ShotRecord {
            shot: i,
            spectrum_a,
            misset_deg: match config.crystal.misset {
                Misset::Angles(a) => a,
                _ => [f64::NAN; 3],
            },
            n_cells: p0.n_cells,
            mosaic_spread_deg: p0.mosaic_spread_rad.to_degrees(),
            mosaic_seed: d.mosaic_seed,
            fluence: p0.fluence,
            water_um: p0.water_size_m * 1e6,
            noise_seed: d.noise_seed,
            photons,
        };
        Ok(Shot { record, pixels, noiseless })
    }
}

/// What `nanobragg dataset` was asked, besides the spec.
#[derive(Debug, Default)]
struct Request {
    spec: PathBuf,
    shard: Option<String>,
    resume: bool,
    progress: Option<bool>,
    /// `-threads`, `-device`: passed to the model.
    extra: Vec<String>,
}

const USAGE: &str = "usage: nanobragg dataset SPEC.toml [-shard i/K] [-resume] [-threads N] \
[-device cpu|cuda|auto] [-progress|-noprogress]

Renders the dataset SPEC.toml describes (docs/dataset.md) into NXmx files, one per worker.
Under mpirun or srun (a build with the mpi feature) the ranks share the shots.
  -shard i/K    render shard i (0-based) of K: shots i, i+K, ... (default: SLURM_ARRAY_TASK_ID
                of SLURM_ARRAY_TASK_COUNT in a Slurm job array, else 0/1)
  -resume       render only the shots that no file in the output folder holds
  -threads N    threads per process (default: all cores)
  -device D     cpu (default), cuda (GPU of the local rank) or auto
  -progress     progress bar on worker 0 (default: when stderr is a terminal)
";

fn request(args: &[String]) -> Result<Option<Request>> {
    let mut r = Request::default();
    let mut spec = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value =
            |flag: &str| it.next().cloned().ok_or_else(|| anyhow!("dataset: {flag} needs a value"));
        match a.as_str() {
            "-h" | "--help" => return Ok(None),
            "-shard" => r.shard = Some(value("-shard")?),
            "-resume" => r.resume = true,
            "-progress" => r.progress = Some(true),
            "-noprogress" => r.progress = Some(false),
            "-threads" | "-device" => {
                let v = value(a)?;
                r.extra.extend([a.clone(), v]);
            }
            f if f.starts_with('-') => bail!("dataset: unknown flag {f}\n{USAGE}"),
            p if spec.is_none() => spec = Some(PathBuf::from(p)),
            p => bail!("dataset: one spec file, not also {p}"),
        }
    }
    r.spec = spec.ok_or_else(|| anyhow!("dataset: no spec file\n{USAGE}"))?;
    Ok(Some(r))
}

/// `nanobragg dataset ...` (the arguments after `dataset`).
pub fn main(args: &[String]) -> Result<()> {
    let Some(req) = request(args)? else {
        std::io::stdout().lock().write_all(USAGE.as_bytes())?;
        return Ok(());
    };
    let spec = DatasetSpec::read(&req.spec)?;
    let team = Team::join(team::shard_from(req.shard.as_deref())?)?;
    if team.ranks > 1 {
        // a rank that panics ends the job: the others would wait for it
        let report = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            report(info);
            std::process::abort();
        }));
    }
    // (every rank reads the same files; one that fails alone ends the job)
    let set = Dataset::new(spec, &req.extra).map_err(|e| team.fail(e))?;
    if set.inv.threads > 0 {
        let _ = rayon::ThreadPoolBuilder::new().num_threads(set.inv.threads).build_global();
    }
    run(&set, &team, &req)
}

/// The output files: `<name>_<worker>.nxs`, `_<part>` where a worker's shots
/// span several, `_resume<n>` for a resumed run's.
fn file_name(name: &str, worker: u64, part: Option<usize>, resume: Option<u32>) -> String {
    let mut s = format!("{name}_{worker:05}");
    if let Some(n) = resume {
        s += &format!("_resume{n}");
    }
    if let Some(p) = part {
        s += &format!("_{p:03}");
    }
    s + ".nxs"
}

/// The dataset's files now in the output folder (committed ones: the
/// hidden temporaries of unfinished files are not listed).
fn existing_files(dir: &Path, name: &str) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(files),
        Err(e) => bail!("dataset: cannot read {}: {e}", dir.display()),
    };
    for e in entries.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if parse_file_name(name, &n).is_some() {
            files.push(e.path());
        }
    }
    files.sort();
    Ok(files)
}

/// The worker, resume pass and part of a file name [`file_name`] made for
/// the dataset `name` (`None`: not one of its names).
fn parse_file_name(name: &str, file: &str) -> Option<(u64, Option<u32>, Option<usize>)> {
    let rest = file.strip_prefix(name)?.strip_prefix('_')?.strip_suffix(".nxs")?;
    let digits = |s: &str, n: usize| s.len() >= n && s.bytes().all(|b| b.is_ascii_digit());
    let mut parts = rest.split('_');
    let worker = parts.next().filter(|w| digits(w, 5))?.parse().ok()?;
    let (mut resume, mut part) = (None, None);
    for p in parts {
        match p.strip_prefix("resume") {
            Some(n) if resume.is_none() && part.is_none() && digits(n, 1) => {
                resume = Some(n.parse().ok()?)
            }
            None if part.is_none() && digits(p, 3) => part = Some(p.parse().ok()?),
            _ => return None,
        }
    }
    Some((worker, resume, part))
}

/// The shots of `owned` that no file in the folder holds; a file written
/// from another spec is refused.
fn missing_shots(set: &Dataset, owned: &[u64]) -> Result<Vec<u64>> {
    let digest = set.digest();
    let mut done = std::collections::HashSet::new();
    for f in existing_files(&set.spec.output, &set.spec.name)? {
        let (shots, d) = read_shots(&f)?;
        if d != digest {
            bail!(
                "dataset: {} was written from another spec (digest {d}, this spec's {digest}): \
                 move it away or give this dataset another name",
                f.display()
            );
        }
        for i in shots {
            if !done.insert(i) {
                eprintln!("warning: dataset: shot {i} is in more than one file ({})", f.display());
            }
        }
    }
    Ok(owned.iter().copied().filter(|i| !done.contains(i)).collect())
}

fn read_shots(path: &Path) -> Result<(Vec<u64>, String)> {
    nanobragg_io::nxmx_series::read_shots(path).map_err(|e| anyhow!("dataset -resume: {e}"))
}

/// One worker's account, gathered on rank 0: worker, shots written, shots
/// lost, photons, seconds, shots to render.
pub type Account = [f64; 6];

/// One worker's part of a dataset, rendered.
pub struct WorkerRun {
    /// This worker's index.
    pub worker: u64,
    /// The shard's shots that were still to render when the run started.
    pub todo: usize,
    /// This worker's shots.
    pub shots: Vec<u64>,
    /// Those written (in files committed).
    pub written: Vec<u64>,
    /// Photons on the shots written.
    pub photons: f64,
    /// Seconds the worker took.
    pub seconds: f64,
    /// What stopped the worker before its last shot.
    pub failure: Option<anyhow::Error>,
}

impl WorkerRun {
    /// The worker's shots not written.
    pub fn lost(&self) -> &[u64] {
        &self.shots[self.written.len()..]
    }

    /// The numbers gathered on rank 0.
    pub fn account(&self) -> Account {
        [
            self.worker as f64,
            self.written.len() as f64,
            self.lost().len() as f64,
            self.photons,
            self.seconds,
            self.shots.len() as f64,
        ]
    }
}

fn run(set: &Dataset, team: &Team, req: &Request) -> Result<()> {
    let show = req.progress.unwrap_or_else(|| std::io::stderr().is_terminal());
    let w = run_worker(set, team, req.resume, show).map_err(|e| team.fail(e))?;
    let (worker, workers) = team.worker();
    if let Some(e) = &w.failure {
        eprintln!(
            "dataset: worker {worker} of {workers} stopped: {e:#}\n\
             dataset: worker {worker} lost {} shots ({}): run again with -resume to render them",
            w.lost().len(),
            shot_list(w.lost())
        );
    }
    if let Some(all) = team.gather(w.account()) {
        summary(&mut std::io::stdout().lock(), set, team, req.resume, w.todo, &all, w.seconds)?;
    }
    let lost = w.lost().len();
    match w.failure {
        Some(e) => Err(e.context(format!("dataset: worker {worker} lost {lost} shots"))),
        None => Ok(()),
    }
}

/// Renders this worker's shots of `set` (all of the shard's with `resume`
/// false, else those no file in the output folder holds) into its files.
/// `progress`: a progress bar where this is worker 0. On a GPU, renders on
/// the one of this process's local rank.
pub fn run_worker(set: &Dataset, team: &Team, resume: bool, progress: bool) -> Result<WorkerRun> {
    let spec = &set.spec;
    let (worker, _) = team.worker();
    let (shard, shards) = team.shard;
    std::fs::create_dir_all(&spec.output)
        .with_context(|| format!("dataset: cannot create {}", spec.output.display()))?;
    if resume {
        remove_stale_temporaries(&spec.output)?;
    }
    let owned: Vec<u64> = (shard..spec.shots).step_by(shards as usize).collect();
    // the shard's shots still to render, as rank 0 of the shard sees them
    // before any of this run's files exist
    let todo = match resume {
        true => team.broadcast_result(|| missing_shots(set, &owned))?,
        false => team.broadcast_result(|| refuse_other_runs(set, team, &owned).map(|()| owned))?,
    };
    let shots: Vec<u64> = todo.iter().copied().skip(team.rank).step_by(team.ranks).collect();
    if set.inv.uses_gpu() {
        // the ranks of a node share its GPUs (modulo the GPUs visible)
        nanobragg_cuda::select_device(team::local_rank());
    }
    let started = Instant::now();
    let bar = progress_bar(progress && worker == 0, shots.len() as u64);
    let (written, photons, failure) = render_files(set, worker, resume, &shots, &bar);
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    Ok(WorkerRun { worker, todo: todo.len(), shots, written, photons, seconds, failure })
}

/// `-resume`: removes the hidden temporaries that killed processes of this
/// host left in the output folder (a SIGKILLed rank cannot remove its own),
/// saying which. Those of other hosts, whose processes only their host can
/// see, and of running processes stay.
fn remove_stale_temporaries(dir: &Path) -> Result<()> {
    let removed = nanobragg_io::temp_names::remove_stale_temporaries(dir)
        .with_context(|| format!("dataset -resume: cannot clean up {}", dir.display()))?;
    if !removed.is_empty() {
        let names: Vec<String> = removed
            .iter()
            .map(|p| p.file_name().unwrap_or_default().to_string_lossy().into_owned())
            .collect();
        eprintln!(
            "dataset -resume: removed {} temporaries of stopped processes of this host ({}): {}",
            removed.len(),
            nanobragg_io::temp_names::host_name(),
            names.join(", ")
        );
    }
    Ok(())
}

/// Without `-resume`, a file of this dataset's name that belongs to this
/// shard's workers (worker ≡ shard mod shards) but that this run does not
/// write (from a run with other ranks or `shots_per_file`, or resumed) is
/// refused: it would be taken for part of this run.
fn refuse_other_runs(set: &Dataset, team: &Team, todo: &[u64]) -> Result<()> {
    let (shard, shards) = team.shard;
    let ours: std::collections::HashSet<String> = (0..team.ranks)
        .flat_map(|rank| {
            let shots = todo.iter().skip(rank).step_by(team.ranks).count();
            let worker = team.worker_of(rank);
            file_names(&set.spec, worker, shots, None)
        })
        .collect();
    for f in existing_files(&set.spec.output, &set.spec.name)? {
        let name = f.file_name().unwrap_or_default().to_string_lossy().into_owned();
        let Some((worker, ..)) = parse_file_name(&set.spec.name, &name) else { continue };
        if worker % shards == shard && !ours.contains(&name) {
            bail!(
                "dataset: {} is from another run of this dataset: give -resume to complete \
                 that run, or move it away",
                f.display()
            );
        }
    }
    Ok(())
}

/// Shots a file of a worker with `shots` shots.
fn per_file(spec: &DatasetSpec, shots: usize) -> usize {
    match spec.shots_per_file {
        0 => shots.max(1),
        n => n as usize,
    }
}

/// The files worker `worker` writes for `shots` shots.
fn file_names(spec: &DatasetSpec, worker: u64, shots: usize, resume: Option<u32>) -> Vec<String> {
    let parts = shots.div_ceil(per_file(spec, shots));
    (0..parts).map(|p| file_name(&spec.name, worker, (parts > 1).then_some(p), resume)).collect()
}

fn shot_list(shots: &[u64]) -> String {
    let mut s: Vec<String> = shots.iter().take(20).map(u64::to_string).collect();
    if shots.len() > 20 {
        s.push(format!("and {} more", shots.len() - 20));
    }
    s.join(", ")
}

fn progress_bar(show: bool, len: u64) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    let style = indicatif::ProgressStyle::with_template(
        "worker 0: {pos}/{len} shots [{bar:30}] {per_sec}, {eta} left",
    )
    .expect("a valid template");
    bar.set_style(style.progress_chars("=> "));
    bar
}

/// Renders `mine` into this worker's files; the shots written (in files
/// committed), the photons on them, and the error that stopped it.
fn render_files(
    set: &Dataset,
    worker: u64,
    resume: bool,
    mine: &[u64],
    bar: &indicatif::ProgressBar,
) -> (Vec<u64>, f64, Option<anyhow::Error>) {
    let spec = &set.spec;
    // a resumed run's files next to the earlier runs' (only this worker
    // writes names with its number)
    let resume_tag = match resume {
        false => None,
        true => {
            let taken: Vec<u32> = existing_files(&spec.output, &spec.name)
                .unwrap_or_default()
                .iter()
                .filter_map(|p| {
                    let name = p.file_name()?.to_string_lossy().into_owned();
                    match parse_file_name(&spec.name, &name)? {
                        (w, Some(n), _) if w == worker => Some(n),
                        _ => None,
                    }
                })
                .collect();
            (1..).find(|n| !taken.contains(n))
        }
    };
    let names = file_names(spec, worker, mine.len(), resume_tag);
    let (mut written, mut photons) = (Vec::new(), 0.0);
    for (chunk, name) in mine.chunks(per_file(spec, mine.len())).zip(&names) {
        match write_file(set, &spec.output.join(name), chunk, bar) {
            Ok(ph) => {
                written.extend_from_slice(chunk);
                photons += ph;
            }
            Err(e) => return (written, photons, Some(e)),
        }
    }
    (written, photons, None)
}

/// Renders `shots` into the file `path`; the photons on them.
fn write_file(
    set: &Dataset,
    path: &Path,
    shots: &[u64],
    bar: &indicatif::ProgressBar,
) -> Result<f64> {
    let panels: Vec<(&nanobragg_core::setup::Plan, &[i32])> =
        set.header.iter().map(|p| (p, &[][..])).collect();
    // (each shot's crystal is turned its own way: see /entry/simulation)
    let header = crate::image_headers::mx_image(&set.header[0], &panels, &set.inv.outputs, false);
    let spec = &set.spec;
    let digest = set.digest();
    let compression = set.inv.outputs.nxmx_compression;
    let texts = (spec.text.as_str(), digest.as_str());
    let mut file =
        image_writer::series(path, &header, shots.len(), spec.noiseless, texts, compression, None)
            .map_err(|e| anyhow!("dataset: {e}"))?;
    let mut photons = 0.0;
    for &i in shots {
        let shot = set.render(i).with_context(|| format!("shot {i}"))?;
        photons += shot.record.photons;
        let pixels: Vec<&[i32]> = shot.pixels.iter().map(|v| &v[..]).collect();
        let floats: Vec<&[f32]> = shot.noiseless.iter().map(|v| &v[..]).collect();
        file.write_frame(&pixels, Some(&floats), shot.record)
            .map_err(|e| anyhow!("dataset: {e}"))?;
        bar.inc(1);
    }
    file.commit().map_err(|e| anyhow!("dataset: {e}"))?;
    Ok(photons)
}

/// The lines rank 0 prints: the dataset, then each worker of this job.
fn summary(
    out: &mut impl Write,
    set: &Dataset,
    team: &Team,
    resume: bool,
    todo: usize,
    all: &[Account],
    seconds: f64,
) -> Result<()> {
    let g = nanobragg_io::cfmt::g;
    let spec = &set.spec;
    let written: f64 = all.iter().map(|a| a[1]).sum();
    let lost: f64 = all.iter().map(|a| a[2]).sum();
    let photons: f64 = all.iter().map(|a| a[3]).sum();
    let (shard, shards) = team.shard;
    let scope = match shards {
        1 => format!("{} shots", spec.shots),
        _ => format!("shard {shard} of {shards} ({todo} shots)"),
    };
    let resumed = if resume { format!(", {todo} missing before this run") } else { String::new() };
    writeln!(
        out,
        "dataset {}: {scope}{resumed}; {} rendered by {} in {} s ({} shots/s), {} lost; \
         {} photons; files {}/{}_*.nxs",
        spec.path.display(),
        written,
        match team.ranks {
            1 => "1 process".to_string(),
            n => format!("{n} ranks"),
        },
        g((seconds * 10.0).round() / 10.0),
        g(((written / seconds.max(1e-9)) * 100.0).round() / 100.0),
        lost,
        g(photons),
        spec.output.display(),
        spec.name
    )?;
    for a in all {
        let rate = if a[4] > 0.0 { a[1] / a[4] } else { 0.0 };
        writeln!(
            out,
            "  worker {}: {} of {} shots, {} lost, {} photons, {} s, {} shots/s",
            a[0],
            a[1],
            a[5],
            a[2],
            g(a[3]),
            g((a[4] * 10.0).round() / 10.0),
            g((rate * 100.0).round() / 100.0)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names() {
        assert_eq!(file_name("run", 3, None, None), "run_00003.nxs");
        assert_eq!(file_name("run", 3, Some(2), Some(1)), "run_00003_resume1_002.nxs");
    }

    #[test]
    fn file_names_parse_back() {
        for (w, part, resume) in [(3, None, None), (12, Some(2), None), (7, Some(11), Some(3))] {
            let name = file_name("run", w, part, resume);
            assert_eq!(parse_file_name("run", &name), Some((w, resume, part)), "{name}");
        }
        // another dataset whose name starts with this one's, and strays
        for stray in ["run_hi_00000.nxs", "run_0001.nxs", "run_00001_x.nxs", "run_00001.h5"] {
            assert_eq!(parse_file_name("run", stray), None, "{stray}");
        }
    }

    #[test]
    fn requests() {
        let a = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let r = request(&a("set.toml -shard 1/4 -resume -threads 2")).unwrap().unwrap();
        assert_eq!((r.shard.as_deref(), r.resume), (Some("1/4"), true));
        assert_eq!(r.extra, a("-threads 2"));
        assert!(request(&a("set.toml -what"))
            .unwrap_err()
            .to_string()
            .contains("unknown flag -what"));
        assert!(request(&a("-resume")).unwrap_err().to_string().contains("no spec file"));
        assert!(request(&a("-h")).unwrap().is_none());
    }

    const MODEL: &str = "-default_F 100 -cell 50 50 50 90 90 90 -lambda 1.3 -distance 80 \
                         -detpixels 48 -pixel 0.2 -mosaic_domains 3 -oversample 1";

    fn dataset(extra: &[&str]) -> Dataset {
        let text = format!(
            "args = \"{MODEL}\"\nshots = 4\nseed = 3\n[crystal]\nn_cells = [4, 8]\n\
             mosaic_deg = [0.02, 0.1]\n[fluence]\njitter = 0.1\n[background]\nwater_um = [0, 20]\n"
        );
        let spec = DatasetSpec::parse(Path::new("t.toml"), &text).unwrap();
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        Dataset::new(spec, &extra).unwrap()
    }

    #[test]
    fn a_shot_is_the_model_with_its_draws() {
        let set = dataset(&[]);
        let shot = set.render(2).unwrap();
        let d = set.draw(2);
        let c = set.config(&d);
        let [x, y, z] = d.misset_deg.unwrap();
        let line = format!(
            "{MODEL} -misset {x} {y} {z} -N {} -mosaic {} -mosaic_seed {} -fluence {} -water {}",
            d.n_cells.unwrap(),
            d.mosaic_deg.unwrap(),
            d.mosaic_seed,
            c.beam.fluence,
            d.water_um.unwrap()
        );
        let args: Vec<String> = line.split_whitespace().map(String::from).collect();
        let plain = crate::parse_args(&args).unwrap().render().unwrap();
        assert!(plain.image.iter().any(|&v| v > 0.0));
        assert_eq!(plain.image, shot.noiseless[0]);
        assert_eq!(shot.record.misset_deg, [x, y, z]);
        assert_eq!(shot.record.noise_seed, d.noise_seed);
        // the noise's photons are those of the image, give or take Poisson
        let mean: f64 = plain.image.iter().map(|&v| v as f64).sum();
        assert!((shot.record.photons - mean).abs() < 6.0 * mean.sqrt() + 1.0);
        // another shot is another image
        assert_ne!(set.render(1).unwrap().noiseless[0], shot.noiseless[0]);
    }

    #[test]
    fn shots_do_not_depend_on_threads() {
        let a = dataset(&["-threads", "1"]).render(3).unwrap();
        let b = dataset(&["-threads", "2"]).render(3).unwrap();
        assert_eq!((a.pixels, a.noiseless), (b.pixels, b.noiseless));
    }

    #[test]
    fn file_flags_are_refused() {
        let text = format!("args = \"{MODEL} -floatfile x.bin\"\nshots = 2\n");
        let spec = DatasetSpec::parse(Path::new("t.toml"), &text).unwrap();
        let e = Dataset::new(spec, &[]).err().unwrap().to_string();
        assert!(e.contains("-floatfile is not a dataset's flag"), "{e}");
        let text = format!("args = \"{MODEL} -noiseimage x.img\"\nshots = 2\n");
        let spec = DatasetSpec::parse(Path::new("t.toml"), &text).unwrap();
        let e = Dataset::new(spec, &[]).err().unwrap().to_string();
        assert!(e.contains("-noiseimage (-noisefile) is not a dataset's flag"), "{e}");
        let text = "args = \"-cell 50 50 50 90 90 90 -default_F 1 -distance -5\"\nshots = 2\n";
        let spec = DatasetSpec::parse(Path::new("t.toml"), text).unwrap();
        assert!(Dataset::new(spec, &[]).is_err());
    }

    #[test]
    fn shards() {
        assert_eq!(team::shard_from(Some("2/4")).unwrap(), (2, 4));
        assert!(team::shard_from(Some("4/4")).is_err());
        assert!(team::shard_from(Some("x")).unwrap_err().to_string().contains("i/K"));
    }
}
