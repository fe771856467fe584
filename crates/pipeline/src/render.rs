//! An [`Invocation`] rendered into memory: nanoBragg.c's seeds, the
//! resolved [`Plan`] and the float image on the chosen device, with no file
//! read or written. The command line's run writes its outputs from the same
//! calls; tests, benches and bindings stop here.

use anyhow::{anyhow, bail, Result};
use nanobragg_core::config::{SfSource, SimConfig};
use nanobragg_core::render::{Backend, Cpu, RenderInfo, RenderOptions};
use nanobragg_core::setup::{Plan, SetupSeeds};

use crate::invocation::{Device, Invocation};

/// The seeds nanoBragg.c takes from the flags, or from the clock where a
/// flag is absent; kept negated, as nanoBragg.c keeps them.
#[derive(Debug, Clone, Copy)]
pub struct Seeds {
    /// `-misset_seed` (`-misset random`).
    pub setup: SetupSeeds,
    /// `-seed` (the noise image).
    pub noise_idum: i64,
}

/// The seeds of the model `config` with the noise seed `noise_seed`
/// (`-misset_seed`, `-seed`), `absent` where a flag is not given: nanoBragg.c's
/// clock for a command's run, a fixed value where every process of a run
/// must draw the same (a dataset's ranks and resumed runs). The one place a
/// run's seeds are chosen.
pub fn seeds_of(config: &SimConfig, noise_seed: Option<i64>, absent: i64) -> Seeds {
    Seeds {
        setup: SetupSeeds {
            misset_idum: config.crystal.misset_seed.unwrap_or(absent).wrapping_neg(),
        },
        noise_idum: noise_seed.unwrap_or(absent).wrapping_neg(),
    }
}

/// Seconds since the epoch: nanoBragg.c's seed where none is given.
pub fn clock_seed() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// An image rendered into memory, with what produced it.
#[derive(Debug)]
pub struct Rendered {
    /// The resolved plan.
    pub plan: Plan,
    /// The seeds it was resolved with.
    pub seeds: Seeds,
    /// `fpixels * spixels` photons per pixel, fast index fastest (the
    /// content of `-floatfile`).
    pub image: Vec<f32>,
    /// What the render gathered on the way (solid angle, row statistics).
    pub info: RenderInfo,
}

impl Invocation {
    /// The seeds of this run (see [`seeds_of`]), an absent flag's from the
    /// clock, read once for both.
    pub fn seeds(&self) -> Seeds {
        seeds_of(&self.config, self.seed, clock_seed())
    }

    /// The resolved plan and the seeds it used. A setup error names the
    /// flag or file it comes from (see [`explain`]).
    pub fn plan(&self) -> Result<(Plan, Seeds)> {
        let seeds = self.seeds();
        let plan = Plan::new(&self.config, seeds.setup).map_err(|e| explain(e, self))?;
        Ok((plan, seeds))
    }

    /// Whether this invocation renders on a GPU: `-device cuda`, or
    /// `-device auto` with a usable one (not under `-corrected`, which the
    /// GPU kernel does not implement).
    pub fn uses_gpu(&self) -> bool {
        match self.device {
            Device::Cpu => false,
            Device::Cuda => true,
            Device::Auto => {
                !self.config.sampling.corrected && nanobragg_cuda::device_info().is_ok()
            }
        }
    }

    /// Refuses `-device cuda -corrected`: the GPU kernel reproduces
    /// nanoBragg.c's physics only (docs/gpu.md).
    pub fn check_device(&self) -> Result<()> {
        if self.device == Device::Cuda && self.config.sampling.corrected {
            bail!(
                "-device cuda: -corrected is not implemented on the GPU (its kernel reproduces \
                 nanoBragg.c's physics only); use -device cpu, or -device auto, which renders \
                 -corrected on the CPU"
            );
        }
        Ok(())
    }

    /// Renders the image of this invocation into memory (the single image:
    /// `-batch`, `-gradient` and the output flags are not looked at).
    pub fn render(&self) -> Result<Rendered> {
        let (plan, seeds) = self.plan()?;
        let (image, info) = render_plan(self, &plan)?;
        Ok(Rendered { plan, seeds, image, info })
    }
}

/// Renders `plan` with the invocation's precision, threads and device.
pub fn render_plan(inv: &Invocation, plan: &Plan) -> Result<(Vec<f32>, RenderInfo)> {
    if !inv.uses_gpu() {
        // (a new image zeroed by the render's threads; only `-device cuda`
        // has a device to check)
        let opts = RenderOptions::new(inv.precision).threads(inv.threads).row_stats();
        return Ok(nanobragg_core::render::render::<f32>(plan, opts).into_parts());
    }
    let mut image = vec![0.0f32; plan.detector.fpixels * plan.detector.spixels];
    let info = render_plan_into(inv, plan, &mut image)?;
    Ok((image, info))
}

/// [`render_plan`] into `image` (zeros, the size of the plan's image): the
/// CPU renders straight into it.
pub fn render_plan_into(inv: &Invocation, plan: &Plan, image: &mut [f32]) -> Result<RenderInfo> {
    inv.check_device()?;
    if inv.uses_gpu() {
        // (with the background and nanoBragg.c's first phi sweep)
        return nanobragg_cuda::Cuda
            .render_into(plan, inv.precision, image)
            .map_err(|e| anyhow!("-device cuda: {}", e.msg));
    }
    let cpu = Cpu { opts: RenderOptions::default().threads(inv.threads) };
    Ok(cpu.render_into(plan, inv.precision, image)?)
}

/// Refuses an image with NaN or infinite pixels, naming the inputs whose
/// product overflowed (checked before any output is replaced: such an image
/// is no use to anyone and would hide the cause).
pub fn check_finite_image(image: &[f32], inv: &Invocation, plan: &Plan) -> Result<()> {
    let bad = image.iter().filter(|v| !v.is_finite()).count();
    if bad == 0 {
        return Ok(());
    }
    let g = nanobragg_io::cfmt::g;
    let b = &inv.config.beam;
    let fluence = if b.flux != 0.0 && b.exposure_s > 0.0 {
        format!(
            "-flux {} x -exposure {} / -beamsize {} mm squared (a fluence of {} photons/m²)",
            g(b.flux),
            g(b.exposure_s),
            g(b.beamsize_mm),
            g(plan.fluence)
        )
    } else {
        format!("-fluence {}", g(plan.fluence))
    };
    Err(anyhow!(
        "the image has {bad} non-finite pixels (of {}): {fluence} overflows the 4-byte float image \
         (at most 3.4e+38 photons per pixel) with these structure factors (-default_F/-hkl), \
         crystal size (-N/-xtalsize) and -water; no image was written",
        image.len()
    ))
}

/// The flag and file of the detector file that set the panels (the last
/// `-expt` or `-geom`), as `-geom FILE`.
pub(crate) fn detector_file(inv: &Invocation) -> Option<String> {
    let (path, file) = inv.detector_files.last()?;
    let flag = match file {
        crate::expt::DetectorFile::Expt(_) => "-expt",
        crate::expt::DetectorFile::Geom(_) => "-geom",
    };
    Some(format!("{flag} {}", path.display()))
}

/// Adds the flag and file a setup error comes from, where the library's
/// message does not say.
pub fn explain(e: nanobragg_core::Error, inv: &Invocation) -> anyhow::Error {
    use nanobragg_core::Error as E;
    let sf_file = || match (&inv.config.sf.source, &inv.hkl_path) {
        (SfSource::Hkl(_), Some(p)) => Some(format!("-hkl {}", p.display())),
        (SfSource::Dump(_), _) => Some(format!("-dump {}", inv.outputs.dumpfile.display())),
        _ => None,
    };
    // a value an -img/-mask header set and no flag overrode
    let from_header = |flag: &str, value: f64| {
        inv.header_values
            .iter()
            .rev()
            .find(|(f, _, v)| *f == flag && *v == value)
            .map(|h| h.1.clone())
    };
    let flag_file = |flag: &str, path: &Option<std::path::PathBuf>| {
        path.as_ref().map(|p| format!("{flag} {}", p.display()))
    };
    let c = &inv.config;
    let context = match &e {
        E::Invalid { what: "-lambda", .. } => from_header("-lambda", c.beam.lambda_a),
        E::Invalid { what: "-pixel", .. } => from_header("-pixel", c.detector.pixel_mm),
        E::Invalid { what: "-distance", .. } => from_header("-distance", c.detector.distance_mm),
        E::TooLarge { what, .. } if what.contains("structure factor") => sf_file(),
        E::Invalid { what: "hkl", .. } => sf_file(),
        E::Invalid { what: "-mask", .. } => flag_file("-mask", &inv.mask_path),
        E::Invalid { what: "-sourcefile", .. } => flag_file("-sourcefile", &inv.source_path),
        E::Invalid { what: "-spectrum", .. } => flag_file("-spectrum", &inv.spectrum_path),
        E::Invalid { what: "-mat", .. } => flag_file("-mat", &inv.mat_path),
        // the panels' setup names -expt for either file: the file that set them
        E::Invalid { what: "-expt", .. } => detector_file(inv),
        _ => None,
    };
    match (context, &e) {
        // the context names the flag already
        (Some(c), E::Invalid { msg, .. }) => anyhow!("{c}: {msg}"),
        (Some(c), _) => anyhow!("{c}: {e}"),
        (None, _) => anyhow!("{e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_from_flags_or_the_clock() {
        let args = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let inv = crate::parse_args(&args("-seed 7 -misset_seed 5")).unwrap();
        let s = inv.seeds();
        assert_eq!((s.noise_idum, s.setup.misset_idum), (-7, -5));
        // both from one reading of the clock
        let before = clock_seed();
        let s = Invocation::default().seeds();
        assert_eq!(s.noise_idum, s.setup.misset_idum);
        assert!((-s.noise_idum - before).abs() <= 1);
    }
}
