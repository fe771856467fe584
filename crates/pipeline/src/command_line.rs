//! The command line of a model: the flags that make the parser give back
//! an invocation's simulation ([`SimConfig`]) and noise seed, for
//! reproducing with the `nanobragg` command a model built or changed in a
//! library or in Python.
//!
//! What only a file can hold (an `-hkl` table, `-expt` panels, a `-mat`
//! orientation, a `-sourcefile`, `-spectrum`, `-stol` table or `-mask`) is
//! written as the file flag the invocation read it from; everything else
//! as value flags, where it differs from what those files give. The result
//! is checked by parsing it again: a model that no command line gives (an
//! amplitude set from an array, a panel moved in memory, a fractional
//! `-Na`) is refused with the part that differs, never written wrong.

use crate::invocation::{Device, Invocation};
use crate::parse::parse_args;
use nanobragg_core::config::{
    BeamConfig, Convention, CrystalConfig, CrystalShape, DetectorConfig, Misset, Pivot,
    SamplingConfig, SfConfig, SfSource, SimConfig,
};
use nanobragg_core::render::Precision;
use std::path::Path;

/// A model that no command line reproduces, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct NoCommandLine(pub String);

impl std::fmt::Display for NoCommandLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no command line gives this model: {}", self.0)
    }
}

impl std::error::Error for NoCommandLine {}

/// The flags (without the program name) whose parse gives `inv`'s
/// simulation and noise seed; outputs, threads and precision are left out.
pub fn to_args(inv: &Invocation) -> Result<Vec<String>, NoCommandLine> {
    let mut out = Args(file_args(inv));
    let base = parse_args(&out.0)
        .map_err(|e| NoCommandLine(format!("its files do not parse again: {e}")))?;
    if matches!(base.config.sf.source, SfSource::Dump(_)) && inv.hkl_path.is_none() {
        if let SfSource::None = inv.config.sf.source {
            return Err(NoCommandLine(format!(
                "without -hkl its command line reads the structure factors of {} (as nanoBragg.c does): give -hkl, or remove that file",
                inv.outputs.dumpfile.display()
            )));
        }
    }
    let (cfg, was) = (&inv.config, &base.config);
    detector_flags(&mut out, &cfg.detector, &was.detector);
    beam_flags(&mut out, &cfg.beam, &was.beam);
    crystal_flags(&mut out, &cfg.crystal, &was.crystal)?;
    sf_flags(&mut out, &cfg.sf, &was.sf);
    sampling_flags(&mut out, cfg, was);
    if let Some(seed) = inv.seed {
        out.push("-seed", [seed.to_string()]);
    }
    let mut again = reparse(&out.0)?;
    // the pivot is the last one a flag chose: said once more at the end,
    // where it counts (custom vectors, one panel; the named conventions and
    // the panels of a file impose their own)
    let d = &cfg.detector;
    if d.convention != Convention::Custom || !d.panels.is_empty() {
        again.config.detector.pivot = d.pivot;
    } else if again.config.detector.pivot != d.pivot {
        let word = match d.pivot {
            Pivot::Sample => "sample",
            Pivot::Beam => "beam",
        };
        out.push("-pivot", [word.to_string()]);
        again = reparse(&out.0)?;
    }
    match first_difference(&again.config, cfg) {
        Some(part) => {
            let file = match inv.detector_files.last() {
                Some((p, _)) if !part.starts_with("the detector") => format!(
                    " (the detector's file {} also sets the beam and crystal: give the values it holds)",
                    p.display()
                ),
                _ => String::new(),
            };
            Err(NoCommandLine(format!("no flag or file holds {part} as it is{file}")))
        }
        None if again.seed != inv.seed => Err(NoCommandLine("the noise seed".into())),
        None => Ok(out.0),
    }
}

fn reparse(args: &[String]) -> Result<Invocation, NoCommandLine> {
    parse_args(args).map_err(|e| NoCommandLine(format!("its flags do not parse: {e}")))
}

/// The part of the simulation where `a` and `b` first differ, in words.
fn first_difference(a: &SimConfig, b: &SimConfig) -> Option<&'static str> {
    let (d, e) = (&a.detector, &b.detector);
    Some(if d.panels != e.panels {
        "the detector's panels"
    } else if d.mask != e.mask {
        "the detector's mask"
    } else if d != e {
        "the detector"
    } else if a.beam.sources != b.beam.sources {
        "the beam's sources"
    } else if a.beam.spectrum != b.beam.spectrum {
        "the beam's spectrum"
    } else if a.beam != b.beam {
        "the beam"
    } else if a.crystal.mat != b.crystal.mat || a.crystal.real_space_a != b.crystal.real_space_a {
        "the crystal's orientation matrix"
    } else if a.crystal != b.crystal {
        "the crystal"
    } else if a.sf.source != b.sf.source {
        "the structure factors (write them to an -hkl file)"
    } else if a.sf != b.sf {
        "the structure factors"
    } else if a.sampling != b.sampling {
        "the sampling"
    } else if a.amorphous != b.amorphous {
        "the amorphous sample"
    } else {
        return None;
    })
}

/// The flags built so far.
struct Args(Vec<String>);

impl Args {
    fn push<const N: usize>(&mut self, flag: &str, values: [String; N]) {
        self.0.push(flag.to_string());
        self.0.extend(values);
    }
    fn switch(&mut self, flag: &str) {
        self.0.push(flag.to_string());
    }
    /// `flag` with `v` where it differs from `was`.
    fn num(&mut self, flag: &str, v: f64, was: f64) {
        if v.to_bits() != was.to_bits() {
            self.push(flag, [num(v)]);
        }
    }
    fn int(&mut self, flag: &str, v: i64, was: i64) {
        if v != was {
            self.push(flag, [v.to_string()]);
        }
    }
    fn opt(&mut self, flag: &str, v: Option<f64>, was: Option<f64>) {
        if let Some(v) = v.filter(|&v| Some(v) != was) {
            self.push(flag, [num(v)]);
        }
    }
    fn vector(&mut self, flag: &str, v: [f64; 3], was: [f64; 3]) {
        if v != was {
            self.push(flag, v.map(num));
        }
    }
}

/// A number as the parser reads it back to the same bits: the shortest
/// decimal, in exponent form where that is shorter (1e26).
fn num(v: f64) -> String {
    let (plain, exp) = (format!("{v}"), format!("{v:e}"));
    match exp.len() < plain.len() {
        true => exp,
        false => plain,
    }
}

/// A number `x` whose `x / 1000` is `m` (a flag in mm for a value kept in
/// m), where the shortest decimal of `m · 1000` is not one.
fn mm_of_m(m: f64) -> f64 {
    let x = m * 1000.0;
    [x, x.next_up(), x.next_down()].into_iter().find(|x| x / 1000.0 == m).unwrap_or(x)
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// The settings of `inv` a library keeps with a model, as flags: threads,
/// precision, device, and the `-intfile` scale and ADC offset (where they
/// are not the defaults).
pub fn settings_args(inv: &Invocation) -> Vec<String> {
    let mut out = Args(Vec::new());
    let was = Invocation::default();
    out.int("-threads", inv.threads as i64, was.threads as i64);
    match inv.precision {
        Precision::Fast64 => {}
        Precision::Fast32 => out.push("-dtype", ["float32".to_string()]),
        Precision::Exact64 => out.switch("-exact"),
    }
    match inv.device {
        Device::Cpu => {}
        Device::Cuda => out.push("-device", ["cuda".to_string()]),
        Device::Auto => out.push("-device", ["auto".to_string()]),
    }
    out.num("-scale", inv.outputs.int_scale, was.outputs.int_scale);
    out.num("-adc", inv.outputs.adc_offset, was.outputs.adc_offset);
    out.0
}

/// The flags of the files `inv` read, in an order that applies them as it
/// did: images, detector files, then a `-mat` that replaced their
/// orientation, and the tables.
pub fn file_args(inv: &Invocation) -> Vec<String> {
    let mut out = Vec::new();
    let mut file = |flag: &str, p: &Path| {
        out.push(flag.to_string());
        out.push(path(p));
    };
    if let Some(p) = &inv.mask_path {
        file("-mask", p);
    }
    if let Some(p) = &inv.img_path {
        file("-img", p);
    }
    for (p, f) in &inv.detector_files {
        let flag = match f {
            crate::expt::DetectorFile::Expt(_) => "-expt",
            crate::expt::DetectorFile::Geom(_) => "-geom",
        };
        file(flag, p);
    }
    if let Some(p) = &inv.mat_path {
        file("-mat", p);
    }
    match (&inv.hkl_path, &inv.config.sf.source) {
        (Some(p), _) => file("-hkl", p),
        // (nanoBragg.c reads the grid of -dump where no -hkl is given)
        (None, SfSource::Dump(_)) => file("-dump", &inv.outputs.dumpfile),
        _ => {}
    }
    if let Some(p) = &inv.model_path {
        file("-model", p);
    }
    if let Some(p) = &inv.source_path {
        file("-sourcefile", p);
    }
    if let Some(p) = &inv.spectrum_path {
        file("-spectrum", p);
    }
    if let Some((p, flag, _)) = &inv.stol {
        file(flag, p);
    }
    if let Some(g) = &inv.space_group {
        out.extend(["-spacegroup".to_string(), g.clone()]);
    }
    for a in &inv.anomalous {
        out.push("-anomalous".to_string());
        out.extend(a.iter().cloned());
    }
    out
}

fn detector_flags(out: &mut Args, d: &DetectorConfig, was: &DetectorConfig) {
    out.num("-pixel", d.pixel_mm, was.pixel_mm);
    if d.fpixels == d.spixels && d.fpixels != was.fpixels && d.spixels != was.spixels {
        out.push("-detpixels", [d.fpixels.to_string()]);
    } else {
        out.int("-detpixels_f", d.fpixels, was.fpixels);
        out.int("-detpixels_s", d.spixels, was.spixels);
    }
    out.num("-detsize_f", d.detsize_f_mm, was.detsize_f_mm);
    out.num("-detsize_s", d.detsize_s_mm, was.detsize_s_mm);
    out.num("-distance", d.distance_mm, was.distance_mm);
    out.opt("-close_distance", d.close_distance_mm, was.close_distance_mm);
    out.opt("-Xbeam", d.xbeam_mm, was.xbeam_mm);
    out.opt("-Ybeam", d.ybeam_mm, was.ybeam_mm);
    out.opt("-Xclose", d.xclose_mm, was.xclose_mm);
    out.opt("-Yclose", d.yclose_mm, was.yclose_mm);
    out.opt("-ORGX", d.orgx_px, was.orgx_px);
    out.opt("-ORGY", d.orgy_px, was.orgy_px);
    out.num("-detector_rotx", d.rotx_deg, was.rotx_deg);
    out.num("-detector_roty", d.roty_deg, was.roty_deg);
    out.num("-detector_rotz", d.rotz_deg, was.rotz_deg);
    out.num("-twotheta", d.twotheta_deg, was.twotheta_deg);
    if d.curved && !was.curved {
        out.switch("-curved_det");
    }
    if d.point_pixel && !was.point_pixel {
        out.switch("-point_pixel");
    }
    // (-detector_abs inf also resets the thickness: before it)
    if d.attenuation_um != was.attenuation_um {
        match d.attenuation_um {
            Some(Some(um)) => out.push("-detector_abs", [num(um)]),
            Some(None) => out.push("-detector_abs", ["inf".to_string()]),
            None => {}
        }
    }
    let thick_was = match d.attenuation_um {
        Some(None) => 0.0,
        _ => was.thick_um,
    };
    out.num("-detector_thick", d.thick_um, thick_was);
    out.int("-detector_thicksteps", d.thicksteps, was.thicksteps);
    if let Some(r) = d.roi.filter(|&r| Some(r) != was.roi) {
        out.push("-roi", r.map(|x| x.to_string()));
    }
    // the vectors select the custom convention; a named one is given after
    out.vector("-fdet_vector", d.fdet, was.fdet);
    out.vector("-sdet_vector", d.sdet, was.sdet);
    out.vector("-odet_vector", d.odet, was.odet);
    out.vector("-beam_vector", d.beam, was.beam);
    out.vector("-polar_vector", d.polar, was.polar);
    out.vector("-spindle_axis", d.spindle, was.spindle);
    out.vector("-twotheta_axis", d.twotheta_axis, was.twotheta_axis);
    if let Some(p) = d.pix0.filter(|&p| Some(p) != was.pix0) {
        out.push("-pix0_vector", p.map(num));
    }
    let named = match d.convention {
        Convention::Custom => None,
        Convention::Adxv => Some("-adxv"),
        Convention::Mosflm => Some("-mosflm"),
        Convention::Xds => Some("-xds"),
        Convention::Dials => Some("-dials"),
        Convention::Denzo => Some("-denzo"),
    };
    let custom = out.0.iter().any(|a| a.ends_with("_vector") || a.ends_with("_axis"));
    match named {
        Some(flag) if d.convention != was.convention || custom => out.switch(flag),
        // a vector flag selects it, even one given its default
        None if was.convention != Convention::Custom && !custom => {
            out.push("-fdet_vector", d.fdet.map(num))
        }
        _ => {}
    }
}

fn beam_flags(out: &mut Args, b: &BeamConfig, was: &BeamConfig) {
    out.num("-lambda", b.lambda_a, was.lambda_a);
    out.num("-fluence", b.fluence, was.fluence);
    out.num("-flux", b.flux, was.flux);
    out.num("-exposure", b.exposure_s, was.exposure_s);
    out.num("-beamsize", b.beamsize_mm, was.beamsize_mm);
    // (-polar turns the correction back on: before -nopolar)
    if b.kahn_factor.to_bits() != was.kahn_factor.to_bits() || (was.nopolar && !b.nopolar) {
        out.push("-polar", [num(b.kahn_factor)]);
    }
    if b.nopolar && !was.nopolar {
        out.switch("-nopolar");
    }
    out.num("-hdivrange", b.hdivrange_mrad, was.hdivrange_mrad);
    out.num("-vdivrange", b.vdivrange_mrad, was.vdivrange_mrad);
    out.num("-hdivstep", b.hdivstep_mrad, was.hdivstep_mrad);
    out.num("-vdivstep", b.vdivstep_mrad, was.vdivstep_mrad);
    out.int("-hdivsteps", b.hdivsteps, was.hdivsteps);
    out.int("-vdivsteps", b.vdivsteps, was.vdivsteps);
    if b.round_div != was.round_div {
        out.switch(if b.round_div { "-round_div" } else { "-square_div" });
    }
    out.num("-dispersion", b.dispersion_pct, was.dispersion_pct);
    out.int("-dispsteps", b.dispsteps, was.dispsteps);
    if b.source_distance_m.to_bits() != was.source_distance_m.to_bits() {
        out.push("-source_distance", [num(mm_of_m(b.source_distance_m))]);
    }
    out.num("-lambda_offset", b.lambda_offset_a, was.lambda_offset_a);
    out.num("-lambda_scale", b.lambda_scale, was.lambda_scale);
}

fn crystal_flags(
    out: &mut Args,
    c: &CrystalConfig,
    was: &CrystalConfig,
) -> Result<(), NoCommandLine> {
    if let Some(cell) = c.cell.filter(|&cell| Some(cell) != was.cell) {
        out.push("-cell", cell.map(num));
    }
    if c.misset != was.misset {
        match c.misset {
            Misset::Angles(a) => out.push("-misset", a.map(num)),
            Misset::Random => out.push("-misset", ["random".to_string()]),
            Misset::None => {}
        }
    }
    if let Some(seed) = c.misset_seed.filter(|&s| Some(s) != was.misset_seed) {
        out.push("-misset_seed", [seed.to_string()]);
    }
    let mut each = [("-Na", c.na, was.na), ("-Nb", c.nb, was.nb), ("-Nc", c.nc, was.nc)].to_vec();
    if c.na == c.nb && c.nb == c.nc && each.iter().all(|&(_, n, n_was)| n != n_was) {
        each = vec![("-N", c.na, was.na)];
    }
    for (flag, n, n_was) in each {
        if n.to_bits() == n_was.to_bits() {
            continue;
        }
        if n.fract() != 0.0 || !(0.0..=i64::MAX as f64).contains(&n) {
            return Err(NoCommandLine(format!(
                "{flag} {n}: the flag takes a whole number of cells"
            )));
        }
        out.push(flag, [format!("{}", n as i64)]);
    }
    out.num("-xtal_thick", c.size_mm[0], was.size_mm[0]);
    out.num("-xtal_width", c.size_mm[1], was.size_mm[1]);
    out.num("-xtal_height", c.size_mm[2], was.size_mm[2]);
    out.num("-mosaic", c.mosaic_deg, was.mosaic_deg);
    out.int("-mosaic_domains", c.mosaic_domains, was.mosaic_domains);
    out.int("-mosaic_seed", c.mosaic_seed, was.mosaic_seed);
    out.num("-phi", c.phi0_deg, was.phi0_deg);
    out.num("-osc", c.osc_deg, was.osc_deg);
    out.num("-phistep", c.phistep_deg, was.phistep_deg);
    out.int("-phisteps", c.phisteps, was.phisteps);
    if c.shape != was.shape {
        out.switch(match c.shape {
            CrystalShape::Square => "-square_xtal",
            CrystalShape::Round => "-round_xtal",
            CrystalShape::Gauss => "-gauss_xtal",
            CrystalShape::Tophat => "-tophat_spots",
        });
    }
    out.num("-fudge", c.fudge, was.fudge);
    Ok(())
}

fn sf_flags(out: &mut Args, s: &SfConfig, was: &SfConfig) {
    out.num("-default_F", s.default_f, was.default_f);
    if s.interpolate != was.interpolate {
        match s.interpolate {
            Some(true) => out.switch("-interpolate"),
            Some(false) => out.switch("-nointerpolate"),
            None => {}
        }
    }
}

fn sampling_flags(out: &mut Args, cfg: &SimConfig, was: &SimConfig) {
    let (s, w): (&SamplingConfig, &SamplingConfig) = (&cfg.sampling, &was.sampling);
    out.int("-oversample", s.oversample, w.oversample);
    for (flag, on, on_was) in [
        ("-oversample_omega", s.oversample_omega, w.oversample_omega),
        ("-oversample_polar", s.oversample_polar, w.oversample_polar),
        ("-oversample_thick", s.oversample_thick, w.oversample_thick),
        ("-corrected", s.corrected, w.corrected),
    ] {
        if on && !on_was {
            out.switch(flag);
        }
    }
    out.num("-dmin", s.dmin_a, w.dmin_a);
    out.num("-water", s.water_um, w.water_um);
    if let (Some(a), Some(b)) = (&cfg.amorphous, &was.amorphous) {
        out.num("-amorphous_thick", a.size_mm[0], b.size_mm[0]);
        out.num("-amorphous_height", a.size_mm[1], b.size_mm[1]);
        out.num("-amorphous_width", a.size_mm[2], b.size_mm[2]);
        out.num("-density", a.density_g_cm3, b.density_g_cm3);
        out.num("-MW", a.molecular_weight, b.molecular_weight);
        out.opt("-molecules", a.molecules, b.molecules);
    }
}
