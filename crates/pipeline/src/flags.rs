//! The flag table: one entry per nanoBragg command-line flag.
//!
//! Each [`Flag`] gives the canonical name, the other spellings accepted, how many
//! values follow and of which [`Kind`], the unit, the default shown in the help,
//! a one-line help text, the range [`Check`] applied to its values and the
//! [`Action`] that applies it to an [`Invocation`]. The parser
//! ([`crate::parse`]), the help text ([`help_text`]) and the error messages
//! are all generated from [`FLAGS`].
//!
//! Names match exactly (case included). The original program matches most
//! flags as substrings, which gives some flags accidental side effects (for
//! example `-twotheta_axis` also setting the two-theta angle, or `-misset_seed`
//! also being read as misset angles); those are not reproduced. Spellings the
//! original accepts on purpose (documented alternatives, deliberately truncated
//! match strings such as `-heigh`) are aliases here.

use std::path::PathBuf;

use nanobragg_core::config::{Convention, CrystalShape, Misset, Pivot};
use nanobragg_core::render::Precision;

use crate::invocation::{Curvatures, Device, Invocation};

/// Sections of the help text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Group {
    /// Detector size, position, orientation and sensor.
    Detector,
    /// Wavelength, intensity, polarization, divergence and spectrum.
    Beam,
    /// Unit cell, orientation, size, mosaicity and rotation.
    Crystal,
    /// Where structure factors come from.
    StructureFactors,
    /// Sub-pixel sampling, region of interest and background.
    Sampling,
    /// Output files, scaling and noise.
    Output,
    /// Program behaviour and flags kept for compatibility.
    Misc,
}

impl Group {
    /// All groups in help order.
    pub const ALL: [Group; 7] = [
        Group::Detector,
        Group::Beam,
        Group::Crystal,
        Group::StructureFactors,
        Group::Sampling,
        Group::Output,
        Group::Misc,
    ];

    /// Section title in the help text.
    pub fn title(self) -> &'static str {
        match self {
            Group::Detector => "Detector",
            Group::Beam => "Beam",
            Group::Crystal => "Crystal",
            Group::StructureFactors => "Structure factors",
            Group::Sampling => "Sampling",
            Group::Output => "Output",
            Group::Misc => "Miscellaneous",
        }
    }
}

/// How many values follow a flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arity {
    /// A switch.
    Zero,
    /// Exactly this many values.
    Exactly(usize),
    /// `-cell`: one to six numbers, stopping early at an argument that starts
    /// with `-` (as the original does).
    Cell,
    /// `-misset`: a word starting with `rand`, or three numbers.
    Misset,
}

/// What each value of a flag is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// No value (switches).
    None,
    /// A finite floating-point number.
    Num,
    /// An integer (a fractional value is truncated with a warning, as `atoi` would).
    Int,
    /// An input file that must exist.
    InFile,
    /// An output file name.
    OutFile,
    /// A word; if the list is not empty it must be one of these.
    Word(&'static [&'static str]),
    /// An attenuation depth: a number, or `inf`.
    AbsDepth,
}

/// Most `-threads` (a thread per row of a 1024² image; more only costs).
pub const MAX_THREADS: u32 = 1024;

/// Range check applied to a flag's values after parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Any value of the kind (numbers are always finite).
    Any,
    /// Every value must be > 0.
    Positive,
    /// Every value must be >= 0.
    NonNegative,
    /// The three values must not all be 0 (a direction).
    NonZeroVector,
    /// `-cell`: a > 0, b and c >= 0, angles in [0, 180).
    Cell,
    /// Every value from 0 to this many (a count whose huge values only
    /// exhaust the machine, such as `-threads`).
    AtMost(u32),
}

/// One parsed value of a flag.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// A finite number ([`Kind::Num`]).
    Num(f64),
    /// An integer ([`Kind::Int`]).
    Int(i64),
    /// A file name or word ([`Kind::InFile`], [`Kind::OutFile`], [`Kind::Word`]),
    /// or the word of `-misset random`.
    Text(String),
    /// `-detector_abs`: `None` for `inf` or 0 (no absorption), else the depth.
    Depth(Option<f64>),
}

/// One flag as it occurred on the command line, with its parsed values.
#[derive(Debug, Clone)]
pub struct Occurrence {
    /// The table entry.
    pub flag: &'static Flag,
    /// The spelling used (the canonical name or an alias).
    pub spelled: String,
    /// The values, already parsed and checked.
    pub values: Vec<Value>,
}

impl Occurrence {
    /// Value `i` as a number (integers are widened). Panics on a table bug.
    pub fn num(&self, i: usize) -> f64 {
        match &self.values[i] {
            Value::Num(v) => *v,
            Value::Int(v) => *v as f64,
            v => unreachable!("{}: value {i} is {v:?}, not a number", self.flag.name),
        }
    }

    /// Value `i` as an integer. Panics on a table bug.
    pub fn int(&self, i: usize) -> i64 {
        match &self.values[i] {
            Value::Int(v) => *v,
            v => unreachable!("{}: value {i} is {v:?}, not an integer", self.flag.name),
        }
    }

    /// Value `i` as text. Panics on a table bug.
    pub fn text(&self, i: usize) -> &str {
        match &self.values[i] {
            Value::Text(s) => s,
            v => unreachable!("{}: value {i} is {v:?}, not text", self.flag.name),
        }
    }

    /// Value `i` as a path.
    pub fn path(&self, i: usize) -> PathBuf {
        PathBuf::from(self.text(i))
    }

    /// The three values of a vector flag.
    pub fn vec3(&self) -> [f64; 3] {
        [self.num(0), self.num(1), self.num(2)]
    }
}

/// Applies an occurrence of a flag (values already checked) to the invocation.
pub type Action = fn(&mut Invocation, &Occurrence);

/// One command-line flag.
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    /// Canonical name, with its leading `-`.
    pub name: &'static str,
    /// Other accepted spellings.
    pub aliases: &'static [&'static str],
    /// Help section.
    pub group: Group,
    /// Number of values.
    pub arity: Arity,
    /// Kind of each value.
    pub kind: Kind,
    /// Range check.
    pub check: Check,
    /// Unit of the values (`mm`, `deg`, ...); empty if none.
    pub unit: &'static str,
    /// Names of the values in the help (`x y z`); empty to derive from kind and unit.
    pub values: &'static str,
    /// Default shown in the help; empty if none worth showing.
    pub default: &'static str,
    /// One-line help text.
    pub help: &'static str,
    /// What the flag does.
    pub action: Action,
    /// The detector pivot the flag also selects, if any.
    pub pivot: Option<Pivot>,
    /// The flag also selects the custom convention.
    pub custom: bool,
}

impl Flag {
    /// A switch.
    const fn switch(name: &'static str, group: Group, help: &'static str, action: Action) -> Flag {
        Flag {
            name,
            aliases: &[],
            group,
            arity: Arity::Zero,
            kind: Kind::None,
            check: Check::Any,
            unit: "",
            values: "",
            default: "",
            help,
            action,
            pivot: None,
            custom: false,
        }
    }

    /// A flag with one number.
    const fn num(
        name: &'static str,
        group: Group,
        unit: &'static str,
        check: Check,
        help: &'static str,
        action: Action,
    ) -> Flag {
        Flag {
            arity: Arity::Exactly(1),
            kind: Kind::Num,
            check,
            unit,
            ..Flag::switch(name, group, help, action)
        }
    }

    /// A flag with one integer.
    const fn int(
        name: &'static str,
        group: Group,
        check: Check,
        help: &'static str,
        action: Action,
    ) -> Flag {
        Flag {
            arity: Arity::Exactly(1),
            kind: Kind::Int,
            check,
            ..Flag::switch(name, group, help, action)
        }
    }

    /// A flag with one file name (`kind` is [`Kind::InFile`] or [`Kind::OutFile`]).
    const fn file(
        name: &'static str,
        group: Group,
        kind: Kind,
        help: &'static str,
        action: Action,
    ) -> Flag {
        Flag { arity: Arity::Exactly(1), kind, ..Flag::switch(name, group, help, action) }
    }

    /// A flag with one word out of `choices` (any word if empty).
    const fn word(
        name: &'static str,
        group: Group,
        choices: &'static [&'static str],
        help: &'static str,
        action: Action,
    ) -> Flag {
        Flag {
            arity: Arity::Exactly(1),
            kind: Kind::Word(choices),
            ..Flag::switch(name, group, help, action)
        }
    }

    /// A flag with a direction vector `x y z`; it selects the custom convention.
    const fn vector(name: &'static str, group: Group, help: &'static str, action: Action) -> Flag {
        Flag {
            custom: true,
            arity: Arity::Exactly(3),
            kind: Kind::Num,
            check: Check::NonZeroVector,
            values: "x y z",
            ..Flag::switch(name, group, help, action)
        }
    }

    /// Sets the aliases.
    const fn aka(self, aliases: &'static [&'static str]) -> Flag {
        Flag { aliases, ..self }
    }

    /// Sets the default shown in the help.
    const fn dflt(self, default: &'static str) -> Flag {
        Flag { default, ..self }
    }

    /// Sets the value names shown in the help.
    const fn vals(self, values: &'static str) -> Flag {
        Flag { values, ..self }
    }

    /// Sets the detector pivot the flag also selects.
    const fn pivots(self, pivot: Pivot) -> Flag {
        Flag { pivot: Some(pivot), ..self }
    }

    /// Applies an occurrence (values already checked): the action, then the
    /// pivot or convention the flag selects.
    pub fn apply(&self, inv: &mut Invocation, occurrence: &Occurrence) {
        (self.action)(inv, occurrence);
        if let Some(pivot) = self.pivot {
            inv.config.detector.pivot = pivot;
        }
        if self.custom {
            inv.config.detector.convention = Convention::Custom;
        }
    }

    /// The help text with what the flag also selects, its range and default.
    fn help_line(&self) -> String {
        let mut text = self.help.to_string();
        match self.pivot {
            Some(Pivot::Beam) => text.push_str("; selects the beam pivot"),
            Some(Pivot::Sample) => text.push_str("; selects the sample pivot"),
            None => {}
        }
        if self.custom {
            text.push_str("; selects the custom convention");
        }
        match self.check {
            Check::Positive => text.push_str("; must be > 0"),
            Check::NonNegative => text.push_str("; must be >= 0"),
            Check::AtMost(n) => text.push_str(&format!("; 0 to {n}")),
            _ => {}
        }
        if !self.default.is_empty() {
            text.push_str(&format!(" (default: {})", self.default));
        }
        if !self.aliases.is_empty() {
            text.push_str(&format!(" [also: {}]", self.aliases.join(", ")));
        }
        text
    }

    /// All spellings: the name then the aliases.
    pub fn spellings(&self) -> impl Iterator<Item = &'static str> {
        std::iter::once(self.name).chain(self.aliases.iter().copied())
    }

    /// The value placeholder for help and error texts, e.g. `<mm>` or `<x y z>`.
    pub fn placeholder(&self) -> String {
        if matches!(self.arity, Arity::Zero) {
            return String::new();
        }
        if !self.values.is_empty() {
            return format!("<{}>", self.values);
        }
        let inner = match self.kind {
            Kind::None => return String::new(),
            Kind::Num if !self.unit.is_empty() => self.unit.to_string(),
            Kind::Num => "value".to_string(),
            Kind::Int => "n".to_string(),
            Kind::InFile | Kind::OutFile => "file".to_string(),
            Kind::Word(choices) if !choices.is_empty() => choices.join("|"),
            Kind::Word(_) => "value".to_string(),
            Kind::AbsDepth => format!("{}|inf", self.unit),
        };
        format!("<{inner}>")
    }
}

/// The looked-up flag for a spelling, if any (exact, case-sensitive).
pub fn lookup(arg: &str) -> Option<&'static Flag> {
    FLAGS.iter().find(|f| f.spellings().any(|s| s == arg))
}

/// What a flag needs, for the "needs a value" error, e.g. `a value (mm)`.
pub fn needs(flag: &Flag) -> String {
    let what = flag.placeholder();
    let what = what.trim_start_matches('<').trim_end_matches('>');
    match flag.arity {
        Arity::Zero => "no value".to_string(),
        Arity::Exactly(1) => format!("a value ({what})"),
        Arity::Exactly(n) => format!("{n} values ({what})"),
        Arity::Cell => format!("1 to 6 values ({what}; Å and deg)"),
        Arity::Misset => "'random' or 3 values (x y z rotations in deg)".to_string(),
    }
}

/// The closest flag spelling to an unknown argument, if it is close enough
/// to be a plausible typo.
pub fn suggest(arg: &str) -> Option<&'static str> {
    let lower = arg.to_lowercase();
    let best = FLAGS
        .iter()
        .flat_map(Flag::spellings)
        .map(|s| (edit_distance(&lower, &s.to_lowercase()), s))
        .min_by_key(|&(d, _)| d)?;
    let len = arg.chars().count().max(best.1.chars().count());
    // case-insensitive equality counts as 1 edit: -xbeam -> -Xbeam
    let d = if best.0 == 0 { 1 } else { best.0 };
    (d <= 3 && d * 3 <= len).then_some(best.1)
}

/// Levenshtein distance between two strings (in characters).
pub fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, &cb) in b.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(ca != cb)).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Records that a flag is accepted for compatibility but does nothing.
fn ignored(inv: &mut Invocation, o: &Occurrence) {
    inv.warnings.push(format!("flag {} has no effect in nanoBragg; ignored", o.spelled));
}

/// The amorphous sample the flags describe, created with nonBragg's
/// defaults on the first of its flags.
fn amorphous(inv: &mut Invocation) -> &mut nanobragg_core::config::AmorphousConfig {
    inv.amorphous
        .get_or_insert_with(|| nanobragg_core::config::AmorphousConfig::new(Vec::new(), 1e10))
}

/// Applies the `-expt` or `-geom` file read for this occurrence.
fn detector_file(inv: &mut Invocation, o: &Occurrence) {
    let path = o.path(0);
    if let Some((_, file)) = inv.detector_files.iter().find(|(p, _)| *p == path) {
        let file = file.clone();
        crate::expt::apply_file(&mut inv.config, &file, inv.expt_shot);
        if let crate::expt::DetectorFile::Expt(list) = &file {
            let e = &list[inv.expt_shot.min(list.len() - 1)];
            if let Some(scan) = &e.scan {
                inv.series = crate::invocation::Series {
                    first_image: scan.first_image,
                    images: scan.images,
                };
            }
            if e.real_space.is_some() {
                inv.mat_path = None;
            }
            inv.expt_shots = if list.len() > 1 { Some((path.clone(), list.len())) } else { None };
        }
    }
}

/// Sets the convention and the pivot that goes with it (as the original does).
fn convention(inv: &mut Invocation, c: Convention, pivot: Pivot) {
    inv.config.detector.convention = c;
    inv.config.detector.pivot = pivot;
}

use Group::{
    Beam as B, Crystal as X, Detector as D, Misc as M, Output as O, Sampling as S,
    StructureFactors as F,
};

/// Every flag, in help order within each group.
pub static FLAGS: &[Flag] = &[
    // ---------------------------------------------------------------- detector
    Flag::num("-distance", D, "mm", Check::Positive,
        "distance from the sample to the direct-beam spot, along the beam",
        |inv, o| inv.config.detector.distance_mm = o.num(0))
        .pivots(Pivot::Beam).dflt("100"),
    Flag::num("-close_distance", D, "mm", Check::Positive,
        "distance from the sample to the nearest point of the detector plane",
        |inv, o| inv.config.detector.close_distance_mm = Some(o.num(0)))
        .pivots(Pivot::Sample).dflt("from -distance"),
    Flag::num("-pixel", D, "mm", Check::Positive, "pixel size",
        |inv, o| inv.config.detector.pixel_mm = o.num(0))
        .dflt("0.1"),
    Flag::int("-detpixels", D, Check::Positive, "detector size in pixels along both axes",
        |inv, o| { inv.config.detector.fpixels = o.int(0); inv.config.detector.spixels = o.int(0); })
        .dflt("from -detsize"),
    Flag::int("-detpixels_f", D, Check::Positive, "detector size in pixels along the fast axis",
        |inv, o| inv.config.detector.fpixels = o.int(0))
        .aka(&["-detpixels_x"])
        .dflt("from -detsize_f"),
    Flag::int("-detpixels_s", D, Check::Positive, "detector size in pixels along the slow axis",
        |inv, o| inv.config.detector.spixels = o.int(0))
        .aka(&["-detpixels_y"])
        .dflt("from -detsize_s"),
    Flag::num("-detsize", D, "mm", Check::Positive,
        "detector size along both axes (ignored along an axis whose pixel count is given)",
        |inv, o| { inv.config.detector.detsize_f_mm = o.num(0); inv.config.detector.detsize_s_mm = o.num(0); })
        .dflt("102.4"),
    Flag::num("-detsize_f", D, "mm", Check::Positive, "detector size along the fast axis",
        |inv, o| inv.config.detector.detsize_f_mm = o.num(0))
        .dflt("102.4"),
    Flag::num("-detsize_s", D, "mm", Check::Positive, "detector size along the slow axis",
        |inv, o| inv.config.detector.detsize_s_mm = o.num(0))
        .dflt("102.4"),
    Flag::num("-Xbeam", D, "mm", Check::Any,
        "direct-beam spot position along the image fast axis",
        |inv, o| inv.config.detector.xbeam_mm = Some(o.num(0)))
        .pivots(Pivot::Beam).dflt("detector centre"),
    Flag::num("-Ybeam", D, "mm", Check::Any,
        "direct-beam spot position along the image slow axis",
        |inv, o| inv.config.detector.ybeam_mm = Some(o.num(0)))
        .pivots(Pivot::Beam).dflt("detector centre"),
    Flag::num("-Xclose", D, "mm", Check::Any,
        "fast-axis position of the point nearest the sample",
        |inv, o| inv.config.detector.xclose_mm = Some(o.num(0)))
        .pivots(Pivot::Sample).dflt("from the beam centre"),
    Flag::num("-Yclose", D, "mm", Check::Any,
        "slow-axis position of the point nearest the sample",
        |inv, o| inv.config.detector.yclose_mm = Some(o.num(0)))
        .pivots(Pivot::Sample).dflt("from the beam centre"),
    Flag::num("-ORGX", D, "pixels", Check::Any,
        "XDS-style fast-axis origin (point nearest the sample)",
        |inv, o| inv.config.detector.orgx_px = Some(o.num(0)))
        .pivots(Pivot::Sample).dflt("from the beam centre"),
    Flag::num("-ORGY", D, "pixels", Check::Any,
        "XDS-style slow-axis origin (point nearest the sample)",
        |inv, o| inv.config.detector.orgy_px = Some(o.num(0)))
        .pivots(Pivot::Sample).dflt("from the beam centre"),
    Flag::word("-pivot", D, &["sample", "beam"],
        "what detector rotations keep fixed: the point nearest the sample or the direct-beam spot; only custom vectors honour it, the named conventions impose their own",
        |inv, o| inv.config.detector.pivot = if o.text(0) == "sample" { Pivot::Sample } else { Pivot::Beam })
        .dflt("beam"),
    Flag::switch("-mosflm", D, "MOSFLM beam-centre convention and axes (the default); pivots about the beam spot",
        |inv, _| convention(inv, Convention::Mosflm, Pivot::Beam)),
    Flag::switch("-denzo", D, "DENZO convention: MOSFLM axes without the half-pixel shift; pivots about the beam spot",
        |inv, _| convention(inv, Convention::Denzo, Pivot::Beam)),
    Flag::switch("-adxv", D, "ADXV convention: origin at the image corner, beam along +z; pivots about the beam spot",
        |inv, _| convention(inv, Convention::Adxv, Pivot::Beam)),
    Flag::switch("-xds", D, "XDS convention: beam along +z, -ORGX/-ORGY origin; pivots about the sample",
        |inv, _| convention(inv, Convention::Xds, Pivot::Sample)),
    Flag::switch("-dials", D, "DIALS convention: as XDS with spindle and polarization along y; pivots about the sample",
        |inv, _| convention(inv, Convention::Dials, Pivot::Beam)),
    Flag::file("-expt", D, Kind::InFile,
        "DIALS experiment list (one experiment): beam, detector panels (one, or several rendered as one image stacked along slow), crystal orientation, rotation axis and scan (a scan of N images is a rotation series, see -images); later flags override it, detector placement flags after it are refused",
        detector_file),
    Flag::file("-geom", D, Kind::InFile,
        "CrystFEL geometry file: detector panels (placed in the DIALS frame, beam along -z) and the wavelength of its photon_energy; later flags override it, detector placement flags after it are refused",
        detector_file),
    Flag::vector("-fdet_vector", D, "direction of increasing fast-axis pixel index",
        |inv, o| inv.config.detector.fdet = o.vec3())
        .dflt("0 0 1"),
    Flag::vector("-sdet_vector", D, "direction of increasing slow-axis pixel index",
        |inv, o| inv.config.detector.sdet = o.vec3())
        .dflt("0 -1 0"),
    Flag {
        check: Check::Any,
        ..Flag::vector("-odet_vector", D,
            "detector normal, away from the sample (a non-unit vector is replaced by fast x slow)",
            |inv, o| inv.config.detector.odet = o.vec3())
    }
    .dflt("1 0 0"),
    Flag {
        check: Check::Any,
        unit: "m",
        default: "from the beam centre",
        custom: false, // (said in its own words)
        ..Flag::vector("-pix0_vector", D,
            "position of the first pixel relative to the sample (m); as in nanoBragg it is recomputed from the beam centre, so it only selects the custom convention",
            |inv, o| { inv.config.detector.pix0 = Some(o.vec3()); inv.config.detector.convention = Convention::Custom; })
    },
    Flag::vector("-twotheta_axis", D, "axis of the -twotheta swing",
        |inv, o| inv.config.detector.twotheta_axis = o.vec3())
        .dflt("0 0 -1"),
    Flag::num("-detector_rotx", D, "deg", Check::Any, "detector rotation about the x axis",
        |inv, o| inv.config.detector.rotx_deg = o.num(0))
        .dflt("0"),
    Flag::num("-detector_roty", D, "deg", Check::Any, "detector rotation about the y axis (after x)",
        |inv, o| inv.config.detector.roty_deg = o.num(0))
        .dflt("0"),
    Flag::num("-detector_rotz", D, "deg", Check::Any, "detector rotation about the z axis (after x and y)",
        |inv, o| inv.config.detector.rotz_deg = o.num(0))
        .dflt("0"),
    Flag::num("-twotheta", D, "deg", Check::Any,
        "detector swing about the two-theta axis",
        |inv, o| inv.config.detector.twotheta_deg = o.num(0))
        .pivots(Pivot::Sample).dflt("0"),
    Flag::switch("-curved_det", D, "curved detector: every pixel at the same distance from the sample",
        |inv, _| inv.config.detector.curved = true),
    Flag::switch("-point_pixel", D, "treat pixels as points: solid angle 1/r^2 without the obliquity factor",
        |inv, _| inv.config.detector.point_pixel = true),
    Flag {
        arity: Arity::Exactly(1),
        kind: Kind::AbsDepth,
        check: Check::NonNegative,
        unit: "µm",
        ..Flag::switch("-detector_abs", D,
            "sensor attenuation depth; 'inf' or 0 turns absorption off (and resets -detector_thick given before it)",
            |inv, o| {
                if let Value::Depth(d) = o.values[0] {
                    inv.config.detector.attenuation_um = Some(d);
                    if d.is_none() {
                        inv.config.detector.thick_um = 0.0;
                    }
                }
            })
    }
    .aka(&["-detector_absorb", "-detector_absorption"])
    .dflt("inf"),
    Flag::num("-detector_thick", D, "µm", Check::NonNegative, "sensor thickness",
        |inv, o| inv.config.detector.thick_um = o.num(0))
        .dflt("0"),
    Flag::int("-detector_thicksteps", D, Check::NonNegative, "number of sensor layers",
        |inv, o| inv.config.detector.thicksteps = o.int(0))
        .aka(&["-thicksteps"])
        .dflt("1"),
    Flag::file("-img", D, Kind::InFile,
        "SMV image whose header sets pixel count and size, distances, wavelength, beam centre, phi and osc (read before all other flags, so they override it)",
        |_, _| {}),
    Flag::file("-mask", D, Kind::InFile,
        "SMV image of 0 (skip) and non-zero (render) pixels; its header is applied like -img's, before -img",
        |_, _| {}),
    // -------------------------------------------------------------------- beam
    Flag::num("-lambda", B, "Å", Check::Positive, "X-ray wavelength",
        |inv, o| inv.config.beam.lambda_a = o.num(0))
        .aka(&["-wave", "-wavelength"])
        .dflt("1"),
    Flag::num("-energy", B, "eV", Check::Positive, "X-ray photon energy: sets the wavelength to 12398.42/energy Å",
        |inv, o| inv.config.beam.lambda_a = 12398.42 / o.num(0))
        .dflt("12398.42, from -lambda"),
    Flag::num("-fluence", B, "photons/m²", Check::NonNegative, "incident photons per unit area",
        |inv, o| inv.config.beam.fluence = o.num(0))
        .dflt("1.25932e+29"),
    Flag::num("-flux", B, "photons/s", Check::NonNegative,
        "incident flux; with -exposure and -beamsize it sets the fluence (0: use -fluence)",
        |inv, o| inv.config.beam.flux = o.num(0))
        .dflt("0"),
    Flag::num("-exposure", B, "s", Check::NonNegative, "exposure time, used with -flux",
        |inv, o| inv.config.beam.exposure_s = o.num(0))
        .dflt("1"),
    Flag::num("-beamsize", B, "mm", Check::Positive,
        "beam width, used with -flux; a crystal larger than the beam is clipped to it",
        |inv, o| inv.config.beam.beamsize_mm = o.num(0))
        .dflt("0.1"),
    Flag::vector("-beam_vector", B, "direction of the X-ray beam",
        |inv, o| inv.config.detector.beam = o.vec3())
        .dflt("1 0 0"),
    Flag::num("-polar", B, "", Check::Any, "Kahn polarization factor (and turns the polarization correction back on)",
        |inv, o| { inv.config.beam.kahn_factor = o.num(0); inv.config.beam.nopolar = false; })
        .vals("k")
        .dflt("0"),
    Flag::vector("-polar_vector", B, "direction of the X-ray electric field",
        |inv, o| inv.config.detector.polar = o.vec3())
        .dflt("0 0 1"),
    Flag::switch("-nopolar", B, "turn off the polarization correction",
        |inv, _| inv.config.beam.nopolar = true),
    Flag::num("-divergence", B, "mrad", Check::NonNegative, "horizontal and vertical beam divergence range",
        |inv, o| { inv.config.beam.hdivrange_mrad = o.num(0); inv.config.beam.vdivrange_mrad = o.num(0); })
        .dflt("0"),
    Flag::num("-hdivrange", B, "mrad", Check::NonNegative, "horizontal divergence range",
        |inv, o| inv.config.beam.hdivrange_mrad = o.num(0))
        .dflt("from -divergence"),
    Flag::num("-vdivrange", B, "mrad", Check::NonNegative, "vertical divergence range",
        |inv, o| inv.config.beam.vdivrange_mrad = o.num(0))
        .dflt("from -divergence"),
    Flag::num("-hdivstep", B, "mrad", Check::NonNegative, "horizontal divergence step",
        |inv, o| inv.config.beam.hdivstep_mrad = o.num(0))
        .dflt("from the range and step count"),
    Flag::num("-vdivstep", B, "mrad", Check::NonNegative, "vertical divergence step",
        |inv, o| inv.config.beam.vdivstep_mrad = o.num(0))
        .dflt("from the range and step count"),
    Flag::int("-divsteps", B, Check::NonNegative, "number of divergence steps, horizontal and vertical",
        |inv, o| { inv.config.beam.hdivsteps = o.int(0); inv.config.beam.vdivsteps = o.int(0); })
        .dflt("1, or 2 with a divergence range"),
    Flag::int("-hdivsteps", B, Check::NonNegative, "number of horizontal divergence steps",
        |inv, o| inv.config.beam.hdivsteps = o.int(0))
        .dflt("from -divsteps"),
    Flag::int("-vdivsteps", B, Check::NonNegative, "number of vertical divergence steps",
        |inv, o| inv.config.beam.vdivsteps = o.int(0))
        .dflt("from -divsteps"),
    Flag::switch("-round_div", B, "keep only divergence points inside the ellipse of the ranges (the default)",
        |inv, _| inv.config.beam.round_div = true),
    Flag::switch("-square_div", B, "keep the full rectangular grid of divergence points",
        |inv, _| inv.config.beam.round_div = false),
    Flag::num("-dispersion", B, "%", Check::NonNegative, "spectral width: full range of delta-lambda/lambda",
        |inv, o| inv.config.beam.dispersion_pct = o.num(0))
        .dflt("0"),
    Flag::int("-dispsteps", B, Check::NonNegative, "number of wavelengths across the spectral width",
        |inv, o| inv.config.beam.dispsteps = o.int(0))
        .dflt("1, or 2 with -dispersion"),
    Flag::file("-sourcefile", B, Kind::InFile,
        "text file of sources, one per line: X Y Z (m) weight wavelength (m); missing columns take the defaults",
        |inv, o| inv.source_path = Some(o.path(0))),
    Flag::file("-spectrum", B, Kind::InFile,
        "spectrum file (simtbx/diffBragg format): lines of wavelength (Å) and weight; the weights, normalised by their sum, are fractions of the fluence. Replaces -lambda for the beam (-lambda still scales -mat); with -divergence, every direction takes every line",
        |inv, o| inv.spectrum_path = Some(o.path(0))),
    Flag::num("-lambda_offset", B, "Å", Check::Any,
        "added to every source wavelength after -lambda_scale: lambda' = offset + scale * lambda (diffBragg's wavelength coefficients)",
        |inv, o| inv.config.beam.lambda_offset_a = o.num(0))
        .dflt("0"),
    Flag::num("-lambda_scale", B, "", Check::Positive,
        "multiplies every source wavelength (spectrum, dispersion, source file or -lambda)",
        |inv, o| inv.config.beam.lambda_scale = o.num(0))
        .vals("s")
        .dflt("1"),
    Flag::num("-source_distance", B, "mm", Check::Positive,
        "distance from the sample to generated sources and to file sources without a position (nanoBragg.c ignores this flag)",
        |inv, o| inv.config.beam.source_distance_m = o.num(0) / 1000.0)
        .aka(&["-source_dist"])
        .dflt("10000"),
    // ----------------------------------------------------------------- crystal
    Flag::file("-batch", M, Kind::InFile,
        "render one shot per line of this file, each line three misset angles (deg) about x y z replacing -misset; writes float images <floatfile stem>_NNNNN<ext>, and int, PGM and noise images likewise where -intfile, -pgmfile, -noisefile are given (shot k's noise seeded -seed + k - 1); a device or pipe takes every shot in turn (one plan upload on the GPU)",
        |inv, o| inv.batch_path = Some(o.path(0))),
    Flag::file("-mat", X, Kind::InFile,
        "MOSFLM orientation matrix: reciprocal vectors a*, b*, c* (times the wavelength) as columns of three lines",
        |inv, o| { inv.mat_path = Some(o.path(0)); inv.config.crystal.real_space_a = None; })
    .aka(&["-matrix"]),
    Flag {
        arity: Arity::Cell,
        kind: Kind::Num,
        check: Check::Cell,
        values: "a b c alpha beta gamma",
        default: "none: give -cell or -mat",
        ..Flag::switch("-cell", X,
            "unit cell instead of -mat; values left out keep earlier ones (b, c = a and angles = 90 when 0 or never given)",
            |inv, o| {
                let mut cell = inv.config.crystal.cell.unwrap_or([0.0; 6]);
                for (k, c) in cell.iter_mut().enumerate().take(o.values.len()) {
                    *c = o.num(k);
                }
                inv.config.crystal.cell = Some(cell);
            })
    },
    Flag {
        arity: Arity::Misset,
        kind: Kind::Num,
        unit: "deg",
        values: "x y z|random",
        ..Flag::switch("-misset", X,
            "crystal rotations about x, y and z (applied in that order), or 'random' for a random orientation",
            |inv, o| {
                inv.config.crystal.misset = if o.values.len() == 1 {
                    Misset::Random
                } else {
                    Misset::Angles([o.num(0), o.num(1), o.num(2)])
                };
            })
    }
    .dflt("0 0 0"),
    Flag::int("-misset_seed", X, Check::Any, "random seed for -misset random",
        |inv, o| inv.config.crystal.misset_seed = Some(o.int(0)))
        .dflt("clock"),
    Flag::int("-N", X, Check::NonNegative, "number of unit cells along a, b and c",
        |inv, o| {
            let n = o.int(0) as f64;
            (inv.config.crystal.na, inv.config.crystal.nb, inv.config.crystal.nc) = (n, n, n);
        })
        .dflt("1"),
    Flag::int("-Na", X, Check::NonNegative, "number of unit cells along a",
        |inv, o| inv.config.crystal.na = o.int(0) as f64)
        .dflt("from -N"),
    Flag::int("-Nb", X, Check::NonNegative, "number of unit cells along b",
        |inv, o| inv.config.crystal.nb = o.int(0) as f64)
        .dflt("from -N"),
    Flag::int("-Nc", X, Check::NonNegative, "number of unit cells along c",
        |inv, o| inv.config.crystal.nc = o.int(0) as f64)
        .dflt("from -N"),
    Flag::num("-xtalsize", X, "mm", Check::NonNegative, "crystal size along a, b and c, instead of -N",
        |inv, o| inv.config.crystal.size_mm = [o.num(0); 3])
        .aka(&["-xtal_size", "-samplesize", "-sample_size"])
        .dflt("0: use -N"),
    Flag::num("-xtal_thick", X, "mm", Check::NonNegative, "crystal size along a, instead of -Na",
        |inv, o| inv.config.crystal.size_mm[0] = o.num(0))
        .aka(&["-xtal_x", "-sample_thick", "-sample_x"])
        .dflt("0: use -Na"),
    Flag::num("-xtal_width", X, "mm", Check::NonNegative, "crystal size along b, instead of -Nb",
        |inv, o| inv.config.crystal.size_mm[1] = o.num(0))
        .aka(&["-xtal_y", "-sample_width", "-sample_y", "-width"])
        .dflt("0: use -Nb"),
    Flag::num("-xtal_height", X, "mm", Check::NonNegative, "crystal size along c, instead of -Nc",
        |inv, o| inv.config.crystal.size_mm[2] = o.num(0))
        .aka(&["-xtal_heigh", "-xtal_z", "-sample_height", "-sample_heigh", "-sample_z", "-height", "-heigh"])
        .dflt("0: use -Nc"),
    Flag::num("-mosaic", X, "deg", Check::NonNegative, "isotropic mosaic spread (90 for a powder)",
        |inv, o| inv.config.crystal.mosaic_deg = o.num(0))
        .aka(&["-mosaicity", "-mosaic_spread"])
        .dflt("0"),
    Flag::int("-mosaic_domains", X, Check::NonNegative, "number of randomly oriented mosaic domains",
        |inv, o| inv.config.crystal.mosaic_domains = o.int(0))
        .aka(&["-mosaic_dom"])
        .dflt("1, or 10 with -mosaic"),
    Flag::int("-mosaic_seed", X, Check::Any, "random seed for the mosaic domains",
        |inv, o| inv.config.crystal.mosaic_seed = o.int(0))
        .dflt("12345678"),
    Flag::num("-phi", X, "deg", Check::Any, "spindle rotation at the start of the exposure",
        |inv, o| inv.config.crystal.phi0_deg = o.num(0))
        .dflt("0"),
    Flag::num("-osc", X, "deg", Check::NonNegative, "spindle rotation range during the exposure",
        |inv, o| inv.config.crystal.osc_deg = o.num(0))
        .dflt("0"),
    Flag::int("-images", X, Check::Positive,
        "a rotation series of this many images, image k (from 0) turning the crystal from -phi + k*-osc by -osc, each with the -mosaic_seed domains and noise seed -seed + k: one NXmx file of every frame (-nxmxfile), numbered files of the others (NAME_00001.img)",
        |inv, o| inv.series.images = o.int(0) as usize)
        .dflt("1, or the -expt scan's"),
    Flag::num("-phistep", X, "deg", Check::NonNegative, "spindle rotation step",
        |inv, o| inv.config.crystal.phistep_deg = o.num(0))
        .dflt("from -osc and -phisteps"),
    Flag::int("-phisteps", X, Check::NonNegative, "number of spindle rotation steps",
        |inv, o| inv.config.crystal.phisteps = o.int(0))
        .dflt("1, or 2 with -osc"),
    Flag::vector("-spindle_axis", X, "right-handed spindle (phi) rotation axis",
        |inv, o| inv.config.detector.spindle = o.vec3())
        .dflt("0 0 1"),
    Flag::switch("-square_xtal", X, "parallelepiped crystal: sharp spots with fringes (the default)",
        |inv, _| inv.config.crystal.shape = CrystalShape::Square),
    Flag::switch("-round_xtal", X, "ellipsoidal crystal",
        |inv, _| inv.config.crystal.shape = CrystalShape::Round),
    Flag::switch("-gauss_xtal", X, "Gaussian spot profile, no fringes between Bragg peaks",
        |inv, _| inv.config.crystal.shape = CrystalShape::Gauss),
    Flag::switch("-tophat_spots", X, "flat-topped spots cut at their half width, no fringes",
        |inv, _| inv.config.crystal.shape = CrystalShape::Tophat)
        .aka(&["-binary_spots"]),
    Flag::num("-fudge", X, "", Check::Any, "factor on the spot size for -gauss_xtal and -tophat_spots",
        |inv, o| inv.config.crystal.fudge = o.num(0))
        .vals("factor")
        .dflt("1"),
    // ------------------------------------------------------- structure factors
    Flag::file("-hkl", F, Kind::InFile, "text file of h k l F for the P1 unit cell",
        |inv, o| inv.hkl_path = Some(o.path(0))),
    Flag::file("-model", F, Kind::InFile,
        "atomic model (PDB or mmCIF) whose structure factors the render takes, summed over its atoms and space group to -dmin (else to the detector's edge)",
        |inv, o| inv.model_path = Some(o.path(0))),
    Flag::word("-spacegroup", F, &[],
        "space group of -model (instead of the file's), or of the -hkl file's asymmetric unit, which it expands: H-M symbol (\"P 21 21 21\", \"C 1 2 1\", \"R 3 :H\"), number, or \"Hall: P 2ac 2ab\"",
        |inv, o| inv.space_group = Some(o.text(0).to_string()))
        .vals("symbol"),
    Flag {
        arity: Arity::Exactly(3),
        kind: Kind::Word(&[]),
        values: "element f' f''",
        ..Flag::switch("-anomalous", F, "anomalous scattering of an element of -model (electrons); repeat for more elements",
            |inv, o| inv.anomalous.push([o.text(0).to_string(), o.text(1).to_string(), o.text(2).to_string()]))
    },
    Flag::num("-default_F", F, "", Check::Any, "structure factor of every reflection not in the -hkl file",
        |inv, o| inv.config.sf.default_f = o.num(0))
        .vals("F")
        .dflt("0"),
    Flag::file("-dump", F, Kind::OutFile,
        "binary copy of the -hkl structure factors, written after reading -hkl and read back whenever -hkl is not given",
        |inv, o| inv.outputs.dumpfile = o.path(0))
        .dflt("Fdump.bin"),
    Flag::switch("-interpolate", F, "tricubic interpolation of structure factors between Bragg peaks",
        |inv, _| inv.config.sf.interpolate = Some(true))
        .dflt("on when the crystal is under 3 cells wide"),
    Flag::switch("-nointerpolate", F, "no structure-factor interpolation",
        |inv, _| inv.config.sf.interpolate = Some(false)),
    // ---------------------------------------------------------------- sampling
    Flag::int("-oversample", S, Check::NonNegative, "sub-pixels per pixel along each axis (0: automatic)",
        |inv, o| inv.config.sampling.oversample = o.int(0))
        .dflt("automatic"),
    Flag::switch("-oversample_omega", S, "compute the solid angle per sub-pixel",
        |inv, _| inv.config.sampling.oversample_omega = true),
    Flag::switch("-oversample_polar", S, "compute the polarization factor per sub-pixel",
        |inv, _| inv.config.sampling.oversample_polar = true),
    Flag::switch("-oversample_thick", S, "compute the sensor absorption per sub-pixel",
        |inv, _| inv.config.sampling.oversample_thick = true),
    Flag {
        arity: Arity::Exactly(4),
        kind: Kind::Int,
        values: "xmin xmax ymin ymax",
        ..Flag::switch("-roi", S, "render only this pixel range (inclusive; a negative bound means the image edge)",
            |inv, o| inv.config.detector.roi = Some([o.int(0), o.int(1), o.int(2), o.int(3)]))
    }
    .dflt("whole image"),
    Flag::num("-dmin", S, "Å", Check::NonNegative, "skip scattering beyond this resolution (0: no limit)",
        |inv, o| inv.config.sampling.dmin_a = o.num(0))
        .dflt("0"),
    Flag::num("-water", S, "µm", Check::NonNegative, "thickness of water around the crystal, added as background",
        |inv, o| inv.config.sampling.water_um = o.num(0))
        .dflt("0"),
    Flag::file("-stol", S, Kind::InFile,
        "amorphous sample (water, air, ice, oil) around the crystal: text table of sin(θ)/λ (Å⁻¹) and F per line; its scattering is added to the image as nonBragg computes it",
        |inv, o| inv.stol = Some((o.path(0), "-stol", 1e10))),
    Flag::file("-4stol", S, Kind::InFile, "as -stol, the table's first column 4·sin(θ)/λ (Å⁻¹)",
        |inv, o| inv.stol = Some((o.path(0), "-4stol", 1e10 / 4.0))),
    Flag::file("-Q", S, Kind::InFile, "as -stol, the table's first column Q = 4π·sin(θ)/λ (Å⁻¹)",
        |inv, o| inv.stol = Some((o.path(0), "-Q", 1e10 / std::f64::consts::PI / 4.0))),
    Flag::num("-amorphous_thick", S, "mm", Check::NonNegative, "thickness of the -stol sample along the beam",
        |inv, o| amorphous(inv).size_mm[0] = o.num(0))
        .dflt("0.1"),
    Flag::num("-amorphous_height", S, "mm", Check::NonNegative, "height of the -stol sample (clipped to -beamsize)",
        |inv, o| amorphous(inv).size_mm[1] = o.num(0))
        .dflt("0.1"),
    Flag::num("-amorphous_width", S, "mm", Check::NonNegative, "width of the -stol sample (clipped to -beamsize)",
        |inv, o| amorphous(inv).size_mm[2] = o.num(0))
        .dflt("0.1"),
    Flag::num("-amorphous_size", S, "mm", Check::NonNegative, "thickness, height and width of the -stol sample at once",
        |inv, o| amorphous(inv).size_mm = [o.num(0); 3])
        .dflt("0.1"),
    Flag::num("-density", S, "g/cm³", Check::Positive, "density of the -stol sample",
        |inv, o| amorphous(inv).density_g_cm3 = o.num(0))
        .aka(&["-sample_density", "-sample_den"])
        .dflt("1"),
    Flag::num("-MW", S, "g/mol", Check::Positive, "molecular weight of the -stol sample's molecules",
        |inv, o| amorphous(inv).molecular_weight = o.num(0))
        .aka(&["-molecular_weight"])
        .dflt("18"),
    Flag::num("-molecules", S, "molecules", Check::NonNegative, "molecules of the -stol sample in the beam (instead of its size and density)",
        |inv, o| amorphous(inv).molecules = Some(o.num(0)))
        .dflt("from the size, -density and -MW"),
    Flag::switch("-exact", S, "render f64 with the C program's formulas, libm and operation order: bit-identical to nanoBragg.c (the default fast f64 path agrees to ~1e-10 of the peak)",
        |inv, _| if inv.precision != Precision::Fast32 { inv.precision = Precision::Exact64 }),
    Flag::switch("-corrected", S, "use corrected physics where nanoBragg.c has known errors (default: reproduce nanoBragg.c)",
        |inv, _| inv.config.sampling.corrected = true),
    // ------------------------------------------------------------------ output
    Flag::file("-floatfile", O, Kind::OutFile, "raw image of 4-byte floats (photons per pixel)",
        |inv, o| { inv.outputs.floatfile = o.path(0); inv.outputs.floatfile_given = true; })
        .aka(&["-floatimage"])
        .dflt("floatimage.bin"),
    Flag::file("-intfile", O, Kind::OutFile, "noiseless SMV image, scaled by -scale",
        |inv, o| { inv.outputs.intfile = o.path(0); inv.outputs.intfile_given = true; })
        .aka(&["-intimage"])
        .dflt("intimage.img"),
    Flag::file("-noisefile", O, Kind::OutFile, "SMV image in photons with Poisson noise (turns noise back on)",
        |inv, o| { inv.outputs.noisefile = o.path(0); inv.outputs.calculate_noise = true; inv.outputs.noisefile_given = true; })
        .aka(&["-noiseimage"])
        .dflt("noiseimage.img"),
    Flag::file("-nxmxfile", O, Kind::OutFile,
        "NXmx (HDF5) image in int32, geometry as NeXus transformations: the noise image without the 65535 clip, or with -nonoise the -intfile image (same -scale and -adc) without it (see docs/formats.md)",
        |inv, o| inv.outputs.nxmxfile = Some(o.path(0)))
        .dflt("none"),
    Flag::word("-nxmx_compression", O, &["none", "deflate", "bslz4"],
        "how NXmx frames are stored, one frame a chunk (-nxmxfile, dataset files): as they are, gzip (level 4; h5py and DIALS read it) or bitshuffle-LZ4 (filter 32008, as Eiger files; h5py reads it through hdf5plugin)",
        |inv, o| inv.outputs.nxmx_compression =
            nanobragg_io::nxmx::Compression::parse(o.text(0)).unwrap_or_default())
        .dflt("none"),
    Flag::word("-noise_rng", O, &["c", "parallel"],
        "the noise's random stream: c (nanoBragg.c's serial ran1, bit for bit its images) or parallel (Philox4x32-10 per pixel: the same image for any thread count or tiling, drawn in parallel; docs/noise.md)",
        |inv, o| inv.outputs.noise_rng =
            nanobragg_core::noise_stream::NoiseStream::parse(o.text(0)).unwrap_or_default())
        .dflt("c"),
    Flag::file("-cbffile", O, Kind::OutFile,
        "miniCBF image (Pilatus header, byte_offset) in int32: the same pixels as -nxmxfile",
        |inv, o| inv.outputs.cbffile = Some(o.path(0)))
        .dflt("none"),
    Flag::switch("-nonoise", O, "do not compute or write the noise image",
        |inv, _| inv.outputs.calculate_noise = false),
    Flag::file("-pgmfile", O, Kind::OutFile, "8-bit PGM preview image (turns the preview back on)",
        |inv, o| { inv.outputs.pgmfile = o.path(0); inv.outputs.write_pgm = true; inv.outputs.pgmfile_given = true; })
        .aka(&["-pgmimage"])
        .dflt("image.pgm"),
    Flag::switch("-nopgm", O, "do not write the PGM preview",
        |inv, _| inv.outputs.write_pgm = false),
    Flag::num("-scale", O, "", Check::Any, "scale factor from photons to -intfile pixel values (0: automatic)",
        |inv, o| inv.outputs.int_scale = o.num(0))
        .vals("factor")
        .dflt("automatic"),
    Flag::num("-pgmscale", O, "", Check::Any, "scale factor for the PGM preview (0: automatic; turns the preview back on)",
        |inv, o| { inv.outputs.pgm_scale = o.num(0); inv.outputs.write_pgm = true; })
        .vals("factor")
        .dflt("automatic"),
    Flag::num("-adc", O, "ADU", Check::Any, "offset added to the pixels of the SMV images",
        |inv, o| inv.outputs.adc_offset = o.num(0))
        .dflt("40"),
    Flag::num("-readout_noise", O, "ADU", Check::NonNegative, "detector response: Gaussian read-out noise of the noise image (rms)",
        |inv, o| inv.outputs.response.readout_noise = o.num(0))
        .aka(&["-readout", "-readnoise"])
        .dflt("0"),
    Flag::num("-flicker", O, "", Check::NonNegative, "detector response: fractional rms of the source intensity, drawn per pixel",
        |inv, o| inv.outputs.response.flicker_noise = o.num(0))
        .vals("fraction")
        .dflt("0"),
    Flag::num("-calibration", O, "", Check::NonNegative, "detector response: fractional rms of the per-pixel calibration error",
        |inv, o| inv.outputs.response.calibration_noise = o.num(0))
        .vals("fraction")
        .dflt("0"),
    Flag::int("-calib_seed", O, Check::Any, "random seed for the calibration error (as noisify's)",
        |inv, o| inv.outputs.response.calib_seed = Some(o.int(0)))
        .dflt("noisify's"),
    Flag::num("-gain", O, "ADU/photon", Check::Positive, "detector response: pixel units per photon in the noise image",
        |inv, o| inv.outputs.response.gain = Some(o.num(0)))
        .dflt("1"),
    Flag::word("-psf", O, &["gauss", "fiber"], "detector response: point-spread function of the noise image (Gaussian, or a fibre-optic taper's)",
        |inv, o| inv.outputs.response.psf = Some(if o.text(0) == "fiber" {
            nanobragg_core::psf::PsfShape::Fiber
        } else {
            nanobragg_core::psf::PsfShape::Gauss
        }))
        .dflt("none"),
    Flag::num("-psf_fwhm", O, "µm", Check::Positive, "full width at half maximum of -psf",
        |inv, o| inv.outputs.response.psf_fwhm_um = Some(o.num(0)))
        .dflt("46"),
    Flag::word("-bits", O, &["16", "32"], "detector response: bits per pixel of the noise image (32: no clipping at 65535)",
        |inv, o| inv.outputs.response.bits32 = o.text(0) == "32")
        .dflt("16"),
    Flag::int("-psf_radius", O, Check::AtMost(1 << 20), "radius of the -psf kernel in pixels (0: automatic)",
        |inv, o| inv.outputs.response.psf_radius = Some(o.int(0)))
        .dflt("automatic"),
    Flag::word("-shard", O, &[],
        "render part i (0-based) of K of a rotation series: a contiguous block of its images (default: SLURM_ARRAY_TASK_ID of the job array)",
        |inv, o| inv.shard = Some(o.text(0).to_string()))
        .vals("i/K")
        .dflt("0/1"),
    Flag::switch("-resume", O, "rotation series: render only the images whose files (or whose block's NXmx file) are not yet written",
        |inv, _| inv.resume = true),
    Flag::int("-seed", O, Check::Any, "random seed for the noise image",
        |inv, o| inv.seed = Some(o.int(0)))
        .dflt("clock"),
    Flag::word("-gradient", O, &[], "also write the derivative of every pixel by these parameters (comma-separated, or all; see docs/derivatives.md), one raw 4-byte float image each",
        |inv, o| inv.gradient = Some(o.text(0).to_string()))
        .vals("NAME[,NAME...]|all")
        .dflt("none"),
    Flag::word("-gradfile", O, &[], "file name prefix of the -gradient images: PREFIX_NAME.bin",
        |inv, o| inv.gradfile = o.text(0).to_string())
        .vals("prefix")
        .dflt("grad"),
    Flag::switch("-curvatures", O, "with -gradient: also write the second derivative of every pixel by each parameter, PREFIX_NAME_NAME.bin",
        |inv, _| inv.curvatures = inv.curvatures.max(Curvatures::Diagonal)),
    Flag::switch("-curvatures_mixed", O, "as -curvatures, and the mixed second derivatives of every pair of parameters, PREFIX_A_B.bin (one render per pair)",
        |inv, _| inv.curvatures = Curvatures::Mixed),
    Flag::switch("-printout", O, "print every rendered pixel's intermediate values (position, hkl, F_cell, F_latt, polarization, solid angle, cell vectors) to stdout",
        |inv, _| inv.printout = true),
    Flag {
        arity: Arity::Exactly(2),
        kind: Kind::Int,
        values: "fast slow",
        default: "every pixel",
        ..Flag::switch("-printout_pixel", O, "print those values for this pixel only (implies -printout); a negative fast index means every pixel",
            |inv, o| { inv.printout_pixel = Some((o.int(0), o.int(1))); inv.printout = true; })
    },
    // -------------------------------------------------------------------- misc
    Flag::switch("-progress", M, "show a progress spinner on stderr when the render takes more than a second (default when stderr is a terminal; nanoBragg printed percentages to stdout)",
        |inv, _| inv.progress = Some(true)),
    Flag::switch("-noprogress", M, "never show the progress spinner",
        |inv, _| inv.progress = Some(false)),
    Flag::int("-threads", M, Check::AtMost(MAX_THREADS), "worker threads (0: all cores)",
        |inv, o| inv.threads = o.int(0) as usize)
        .dflt("0"),
    Flag::word("-dtype", M, &["float64", "float32"], "floating-point precision of the render",
        |inv, o| match (o.text(0), inv.precision) {
            ("float32", _) => inv.precision = Precision::Fast32,
            (_, Precision::Fast32) => inv.precision = Precision::Fast64,
            _ => {} // keeps -exact
        })
        .dflt("float64"),
    Flag::word("-device", M, &["cpu", "cuda", "auto"], "where to render: CPU, NVIDIA GPU, or a GPU when available",
        |inv, o| inv.device = match o.text(0) {
            "cpu" => Device::Cpu,
            "cuda" => Device::Cuda,
            _ => Device::Auto,
        })
        .dflt("cpu"),
    Flag::switch("-h", M, "print this help and exit", |inv, _| inv.help = true)
        .aka(&["--help", "-help"]),
    Flag::word("-stolout", M, &[], "never written by nanoBragg.c; ignored with a warning", ignored).vals("file"),
    Flag::switch("-coherent", M, "unused by nanoBragg.c; ignored with a warning", ignored),
];

// ------------------------------------------------------------------- help

/// Column where the help text of a flag starts.
const HELP_COL: usize = 32;
/// Width the text is wrapped to.
const WIDTH: usize = 100;

/// The full help text: usage, then every flag by group with its aliases,
/// value placeholder (with unit), default and allowed range.
pub fn help_text() -> String {
    let mut out = String::new();
    out.push_str(
        "nanobragg: simulate X-ray diffraction images of small crystals\n\
         (a drop-in replacement for nanoBragg with the same command line)\n\
         \n\
         usage: nanobragg [flags]\n\
         \n\
         A run needs a crystal orientation (-mat, or -cell with optional -misset) and\n\
         structure factors (-hkl, an Fdump file left by an earlier run, or -default_F).\n\
         Flags are applied in the order given, so a later flag overrides an earlier one;\n\
         names must be spelled exactly as listed (the alternatives under 'also').\n",
    );
    for group in Group::ALL {
        out.push('\n');
        out.push_str(group.title());
        out.push_str(":\n");
        for flag in FLAGS.iter().filter(|f| f.group == group) {
            let mut head = format!("  {}", flag.name);
            let ph = flag.placeholder();
            if !ph.is_empty() {
                head.push(' ');
                head.push_str(&ph);
            }
            push_entry(&mut out, &head, &flag.help_line());
        }
    }
    out
}

/// Appends `head` and `text` wrapped at [`WIDTH`], the text starting at [`HELP_COL`].
fn push_entry(out: &mut String, head: &str, text: &str) {
    let indent = " ".repeat(HELP_COL);
    let head_len = head.chars().count();
    let mut line = if head_len + 2 <= HELP_COL {
        format!("{head}{}", " ".repeat(HELP_COL - head_len))
    } else {
        out.push_str(head);
        out.push('\n');
        indent.clone()
    };
    let mut line_len = HELP_COL;
    let mut first = true;
    for word in text.split(' ') {
        let wl = word.chars().count();
        if !first && line_len + 1 + wl > WIDTH {
            out.push_str(line.trim_end());
            out.push('\n');
            line = indent.clone();
            line_len = HELP_COL;
            first = true;
        }
        if !first {
            line.push(' ');
            line_len += 1;
        }
        line.push_str(word);
        line_len += wl;
        first = false;
    }
    out.push_str(line.trim_end());
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn spellings_are_unique_and_well_formed() {
        let mut seen = HashSet::new();
        for f in FLAGS {
            for s in f.spellings() {
                assert!(s.starts_with('-') && !s.contains(' '), "{s}");
                assert!(seen.insert(s), "duplicate spelling {s}");
            }
            assert!(!f.help.is_empty(), "{} has no help", f.name);
            let takes_values = !matches!(f.arity, Arity::Zero);
            assert_eq!(takes_values, f.kind != Kind::None, "{}: arity and kind disagree", f.name);
        }
    }

    #[test]
    fn documented_spellings_exist() {
        for s in [
            "-floatfile",
            "-floatimage",
            "-intfile",
            "-intimage",
            "-pgmfile",
            "-pgmimage",
            "-noisefile",
            "-noiseimage",
            "-lambda",
            "-wave",
            "-samplesize",
            "-sample_size",
            "-xtalsize",
            "-xtal_size",
            "-sample_thick",
            "-sample_x",
            "-xtal_thick",
            "-xtal_x",
            "-sample_width",
            "-sample_y",
            "-xtal_width",
            "-xtal_y",
            "-width",
            "-sample_height",
            "-sample_z",
            "-xtal_height",
            "-xtal_z",
            "-height",
            "-heigh",
            "-detpixels_f",
            "-detpixels_x",
            "-detpixels_s",
            "-detpixels_y",
            "-mosaic",
            "-mosaicity",
            "-mosaic_spread",
            "-mosaic_dom",
            "-mosaic_domains",
            "-detector_abs",
            "-detector_absorb",
            "-detector_absorption",
            "-detector_thicksteps",
            "-thicksteps",
            "-binary_spots",
            "-tophat_spots",
            "-density",
            "-sample_density",
            "-MW",
            "-molecules",
            "-source_dist",
            "-source_distance",
        ] {
            assert!(lookup(s).is_some(), "{s}");
        }
    }

    #[test]
    fn suggestions() {
        assert_eq!(suggest("-distanse"), Some("-distance"));
        assert_eq!(suggest("--distance"), Some("-distance"));
        assert_eq!(suggest("-xbeam"), Some("-Xbeam"));
        assert_eq!(suggest("-oversample_omg"), Some("-oversample_omega"));
        assert_eq!(suggest("-qwertyuiop"), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn placeholders_and_needs() {
        assert_eq!(lookup("-distance").unwrap().placeholder(), "<mm>");
        assert_eq!(needs(lookup("-distance").unwrap()), "a value (mm)");
        assert_eq!(needs(lookup("-roi").unwrap()), "4 values (xmin xmax ymin ymax)");
        assert_eq!(lookup("-pivot").unwrap().placeholder(), "<sample|beam>");
        assert_eq!(lookup("-detector_abs").unwrap().placeholder(), "<µm|inf>");
        assert_eq!(lookup("-hkl").unwrap().placeholder(), "<file>");
        assert_eq!(lookup("-N").unwrap().placeholder(), "<n>");
    }
}

#[cfg(test)]
mod help_tests {
    use super::*;

    #[test]
    fn every_flag_and_alias_listed() {
        let h = help_text();
        for f in FLAGS {
            for s in f.spellings() {
                assert!(h.contains(s), "{s} missing from help");
            }
        }
        for g in Group::ALL {
            assert!(h.contains(&format!("{}:\n", g.title())));
        }
        assert!(h.contains("  -distance <mm>"));
        assert!(h.contains("(default: 100)"));
        assert!(h.contains("must be > 0"));
    }

    #[test]
    fn value_flags_show_unit_and_default() {
        let h = help_text();
        let mut missing = Vec::new();
        for f in FLAGS {
            if matches!(f.kind, Kind::Num | Kind::Int | Kind::AbsDepth) {
                // numbers show their unit (or value names) in the placeholder
                let ph = f.placeholder();
                assert!(h.contains(&format!("  {} {ph}", f.name)), "{}: no placeholder", f.name);
                if f.kind == Kind::Num && f.unit.is_empty() && f.values.is_empty() {
                    missing.push(format!("{}: no unit", f.name));
                }
                if f.default.is_empty() && !f.help.contains("ignored with a warning") {
                    missing.push(format!("{}: no default", f.name));
                }
            }
        }
        assert!(missing.is_empty(), "{missing:#?}");
    }

    #[test]
    fn lines_fit() {
        for line in help_text().lines() {
            assert!(line.chars().count() <= WIDTH, "too long: {line}");
        }
    }
}
