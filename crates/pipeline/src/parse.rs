//! The nanoBragg command line: turns the argument list into an [`Invocation`].
//!
//! Parsing is driven by the flag table in [`crate::flags`]. It runs in three
//! passes, which reproduce what the original program does without copying its
//! accidental substring matches:
//!
//! 1. every argument is matched *exactly* against the table (names and aliases)
//!    and its values are parsed and range-checked; nothing is applied yet, so a
//!    typo anywhere is reported before any file is read;
//! 2. the `-mask` and then the `-img` SMV headers are applied (the original reads
//!    both files before looking at any other flag, whatever their position, so
//!    explicit flags override header values and the image header overrides the
//!    mask header);
//! 3. the flags are applied in command-line order, so the last one wins and side
//!    effects such as the detector pivot follow the order given.
//!
//! Finally the input files (`-hkl` or a left-over Fdump file, `-mat`,
//! `-sourcefile`) are read into the configuration.

use std::path::Path;

use nanobragg_core::config::{AmorphousConfig, SfSource};
use nanobragg_core::error::shown;
use nanobragg_core::SimConfig;

use crate::flags::{self, Arity, Check, Flag, Kind, Occurrence, Value};
// the value types' old home: other crates and modules name them through here
pub use crate::cli_error::CliError;
pub use crate::invocation::{Curvatures, Device, Invocation, Outputs};

/// True for the spellings that ask for help.
fn is_help(arg: &str) -> bool {
    flags::lookup(arg).is_some_and(|f| f.name == "-h")
}

/// Parses the arguments that follow the program name (`std::env::args().skip(1)`).
///
/// Reads the input files named on the command line (`-mask`, `-img`, `-hkl`,
/// `-mat`, `-sourcefile`) and, when no `-hkl` is given, the dump file (`-dump`,
/// default `Fdump.bin`) if it exists, as nanoBragg.c does even with `-default_F`.
/// If `-h`/`--help` appears anywhere, nothing else is parsed and the returned
/// invocation only has `help` set.
pub fn parse_args(args: &[String]) -> Result<Invocation, CliError> {
    let mut inv = Invocation { args: args.to_vec(), ..Invocation::default() };
    if args.iter().any(|a| is_help(a)) {
        inv.help = true;
        return Ok(inv);
    }
    let occurrences = tokenize(args, &mut inv.warnings)?;

    // Pass 2: image headers first, mask then image, whatever their position.
    let last_path =
        |name: &str| occurrences.iter().rev().find(|o| o.flag.name == name).map(|o| o.path(0));
    let mask = match last_path("-mask") {
        Some(path) => Some((read_image("-mask", &path)?, path)),
        None => None,
    };
    let image = match last_path("-img") {
        // nanoBragg.c reads only the header of -img, never its pixels
        Some(path) => Some((
            nanobragg_io::smv::read_smv_header(&path)
                .map_err(|error| CliError::Image { flag: "-img".to_string(), error })?,
            path,
        )),
        None => None,
    };
    // a header value that a flag (or, for the mask, the -img header)
    // replaces is never used, as in nanoBragg.c: only the others are checked
    let given = |flags: &[&str]| occurrences.iter().any(|o| flags.contains(&o.flag.name));
    let by_flag = |stands_for: &str| match stands_for {
        "-lambda" => given(&["-lambda", "-energy"]),
        f => given(&[f]),
    };
    if let Some((img, path)) = &mask {
        let by_img = |key: &str| {
            image.as_ref().is_some_and(|((i, _), _)| header_entry(&i.geometry(), key).is_some())
        };
        check_smv_header("-mask", path, img, |key, flag| by_flag(flag) || by_img(key))?;
    }
    if let Some(((img, _), path)) = &image {
        check_smv_header("-img", path, img, |_, flag| by_flag(flag))?;
    }
    if let Some((img, path)) = mask {
        apply_smv_header(&mut inv.config, &img, true);
        record_header_values(&mut inv, "-mask", &path, &img);
        inv.config.detector.mask = Some(img.data);
        inv.mask_path = Some(path);
    }
    if let Some(((img, short), path)) = image {
        if let Some((needed, actual)) = short {
            inv.warnings.push(format!(
                "-img {}: the pixel data is short ({actual} bytes in the file, {needed} for its {} x {} pixels); only the header is used",
                shown(&path.display().to_string()),
                img.width,
                img.height
            ));
        }
        apply_smv_header(&mut inv.config, &img, false);
        record_header_values(&mut inv, "-img", &path, &img);
        inv.img_path = Some(path);
        inv.img_size = Some((img.width, img.height));
    }

    for occ in occurrences.iter().filter(|o| ["-expt", "-geom"].contains(&o.flag.name)) {
        let path = occ.path(0);
        if !inv.detector_files.iter().any(|(p, _)| *p == path) {
            let file = crate::expt::read(occ.flag.name, &path)?;
            inv.detector_files.push((path, file));
        }
    }
    check_order(&occurrences)?;
    let wavelength_given =
        occurrences.iter().any(|o| ["-lambda", "-energy"].contains(&o.flag.name));
    for (path, file) in &inv.detector_files {
        if let crate::expt::DetectorFile::Geom(g) = file {
            let file = shown(&path.display().to_string());
            inv.warnings.extend(g.warnings.iter().map(|w| format!("-geom {file}: {w}")));
            if let Some(from) = g.photon_energy_path.as_ref().filter(|_| !wavelength_given) {
                inv.warnings.push(format!(
                    "-geom {}: photon_energy is read from the data file ({from}); the wavelength is -lambda's default, {} Å (give -lambda or -energy)",
                    shown(&path.display().to_string()),
                    inv.config.beam.lambda_a
                ));
            }
        }
    }

    // Pass 3: every flag in order.
    let lists = |inv: &Invocation| {
        inv.detector_files
            .iter()
            .any(|(_, f)| matches!(f, crate::expt::DetectorFile::Expt(list) if list.len() > 1))
    };
    let before = lists(&inv).then(|| inv.clone());
    for occ in &occurrences {
        occ.flag.apply(&mut inv, occ);
    }

    read_inputs(&mut inv)?;
    if let (Some(before), Some((_, n))) = (before, inv.expt_shots.clone()) {
        inv.shot_configs = expt_shots(&inv, before, &occurrences, n)?;
    }
    Ok(inv)
}

/// The configuration of each experiment of the `-expt` list of `inv`: the
/// flags applied again in order from the invocation `before` them, that
/// experiment's values set where the `-expt` stands, and the files the
/// flags name taken from `inv` (read once).
fn expt_shots(
    inv: &Invocation,
    before: Invocation,
    occurrences: &[Occurrence],
    n: usize,
) -> Result<Vec<SimConfig>, CliError> {
    let mut configs = vec![inv.config.clone()];
    // (read once, where an experiment without a crystal needs it)
    let mut mat = inv.config.crystal.mat;
    for k in 1..n {
        let mut shot = before.clone();
        shot.expt_shot = k;
        for occ in occurrences {
            occ.flag.apply(&mut shot, occ);
        }
        let (mut cfg, main) = (shot.config, &inv.config);
        cfg.sf.source = main.sf.source.clone();
        cfg.beam.sources = main.beam.sources.clone();
        cfg.beam.spectrum = main.beam.spectrum.clone();
        cfg.amorphous = main.amorphous.clone();
        if let Some(path) = &shot.mat_path {
            if mat.is_none() {
                let read = nanobragg_core::crystal::matfile::read_mat(path)
                    .map_err(|error| CliError::Input { flag: "-mat".into(), error })?;
                mat = Some(read);
            }
            cfg.crystal.mat = mat;
        }
        configs.push(cfg);
    }
    Ok(configs)
}

/// Refuses a detector placement flag after the last `-expt` or `-geom`
/// (the file places the detector).
fn check_order(occurrences: &[Occurrence]) -> Result<(), CliError> {
    let files = ["-expt", "-geom"];
    let Some(last) = occurrences.iter().rposition(|o| files.contains(&o.flag.name)) else {
        return Ok(());
    };
    let file = occurrences[last].flag.name;
    match occurrences[last..].iter().find(|o| crate::expt::PLACEMENT.contains(&o.flag.name)) {
        Some(o) => Err(CliError::Unused {
            what: format!(
                "{} after {file}: the file places the detector; give it before {file} (which then replaces it) or change the file",
                o.spelled
            ),
        }),
        None => Ok(()),
    }
}

/// Reads an SMV image for `-img` or `-mask`.
fn read_image(flag: &str, path: &Path) -> Result<nanobragg_io::smv::SmvImage, CliError> {
    nanobragg_io::smv::read_smv(path)
        .map_err(|error| CliError::Image { flag: flag.to_string(), error })
}

/// The header keys [`apply_smv_header`] reads and the flags they stand for,
/// in the order they are checked (`CLOSE_DISTANCE` before `DISTANCE`, which
/// also matches it, so that the key named is the one in the file).
const HEADER_FLAGS: [(&str, &str); 10] = [
    ("PIXEL_SIZE", "-pixel"),
    ("CLOSE_DISTANCE", "-close_distance"),
    ("DISTANCE", "-distance"),
    ("WAVELENGTH", "-lambda"),
    ("BEAM_CENTER_X", "-Xbeam"),
    ("BEAM_CENTER_Y", "-Ybeam"),
    ("ORGX", "-ORGX"),
    ("ORGY", "-ORGY"),
    ("PHI", "-phi"),
    ("OSC_RANGE", "-osc"),
];

/// Refuses header values that the flags they stand for would refuse (a
/// header is one more way to give those values, not a way around the
/// checks), except where `replaced(key, flag)` says the value is not used.
fn check_smv_header(
    flag: &'static str,
    path: &Path,
    img: &nanobragg_io::smv::SmvImage,
    replaced: impl Fn(&str, &str) -> bool,
) -> Result<(), CliError> {
    let geometry = img.geometry();
    for (key, stands_for) in HEADER_FLAGS {
        if replaced(key, stands_for) {
            continue;
        }
        // (NaN, a `nan` in the file, is no value, as an absent key)
        let Some(v) = header_entry(&geometry, key) else { continue };
        let target = flags::lookup(stands_for).expect("header keys stand for table flags");
        let raw = [format!("{v}")];
        let why = if v.is_finite() {
            match check_values(target, stands_for, &raw, &[Value::Num(v)]) {
                Err(CliError::OutOfRange { why, .. }) => why,
                _ => continue,
            }
        } else {
            "must be finite".to_string()
        };
        return Err(CliError::HeaderValue {
            flag,
            path: path.to_path_buf(),
            entry: format!("{key}={}", raw[0]),
            stands_for,
            why,
        });
    }
    Ok(())
}

/// Notes the header values that, when invalid, a later error should trace
/// back to the image file rather than to the flag.
fn record_header_values(
    inv: &mut Invocation,
    flag: &str,
    path: &Path,
    img: &nanobragg_io::smv::SmvImage,
) {
    let geometry = img.geometry();
    for (key, target) in
        [("PIXEL_SIZE", "-pixel"), ("DISTANCE", "-distance"), ("WAVELENGTH", "-lambda")]
    {
        if let Some(v) = header_entry(&geometry, key) {
            let from = format!("{flag} {} header {key}={v}", path.display());
            inv.header_values.push((target, from, v));
        }
    }
}

/// Applies the detector and beam values found in an SMV header, as nanoBragg.c
/// does for `-img` and `-mask` (values only: the pivot is not changed).
///
/// Keys are looked up with the original's last-substring rule, so `DISTANCE`
/// yields `CLOSE_DISTANCE`'s value when that key comes later and `ORGX` matches
/// `XDS_ORGX`. `TWOTHETA` is ignored, as in the original (it lands in an unused
/// variable). For a mask, `BEAM_CENTER_Y` is measured from the other edge.
pub fn apply_smv_header(config: &mut SimConfig, img: &nanobragg_io::smv::SmvImage, is_mask: bool) {
    let h = img.geometry();
    let det = &mut config.detector;
    det.fpixels = h.width as i64;
    det.spixels = h.height as i64;
    if let Some(v) = h.pixel_size_mm {
        det.pixel_mm = v;
    }
    det.detsize_f_mm = det.pixel_mm * h.width as f64;
    det.detsize_s_mm = det.pixel_mm * h.height as f64;
    if let Some(v) = h.distance_mm {
        det.distance_mm = v;
    }
    if let Some(v) = h.close_distance_mm {
        det.close_distance_mm = Some(v);
    }
    if let Some(v) = h.wavelength_a {
        config.beam.lambda_a = v;
    }
    if let Some(v) = h.beam_center_x_mm {
        det.xbeam_mm = Some(v);
    }
    if let Some(v) = h.beam_center_y_mm {
        det.ybeam_mm = Some(if is_mask { det.detsize_s_mm - v } else { v });
    }
    if let Some(v) = h.orgx_px {
        det.orgx_px = Some(v);
    }
    if let Some(v) = h.orgy_px {
        det.orgy_px = Some(v);
    }
    if let Some(v) = h.phi_deg {
        config.crystal.phi0_deg = v;
    }
    if let Some(v) = h.osc_range_deg {
        config.crystal.osc_deg = v;
    }
}

/// The value of header key `key` (one of [`HEADER_FLAGS`]) in `geometry`.
fn header_entry(geometry: &nanobragg_io::smv::SmvGeometry, key: &str) -> Option<f64> {
    geometry.values().into_iter().find(|(k, _)| *k == key).and_then(|(_, v)| v)
}

/// Reads the structure factors, orientation matrix and source file.
fn read_inputs(inv: &mut Invocation) -> Result<(), CliError> {
    let input = |flag: &str| {
        let flag = flag.to_string();
        move |error| CliError::Input { flag, error }
    };
    if inv.model_path.is_some() && inv.hkl_path.is_some() {
        return Err(CliError::Unused {
            what: "-model and -hkl both give the structure factors: give one".into(),
        });
    }
    if !inv.anomalous.is_empty() && inv.model_path.is_none() {
        return Err(CliError::Unused {
            what: "-anomalous gives f' and f'' of the atoms of -model: give -model FILE".into(),
        });
    }
    if inv.space_group.is_some() && inv.model_path.is_none() && inv.hkl_path.is_none() {
        return Err(CliError::Unused {
            what: "-spacegroup is the symmetry of -model or of an -hkl asymmetric unit: give one of them".into(),
        });
    }
    if let Some(path) = &inv.hkl_path {
        let mut entries = nanobragg_core::sf::read_hkl(path).map_err(input("-hkl"))?;
        if let Some(symbol) = &inv.space_group {
            let group =
                crate::model::space_group(symbol, "-spacegroup").map_err(input("-spacegroup"))?;
            entries = crate::model::expand(&entries, &group).map_err(input("-hkl"))?;
        }
        inv.config.sf.source = SfSource::Hkl(entries.into());
    } else if let Some(path) = inv.model_path.clone() {
        model_structure_factors(inv, &path).map_err(input("-model"))?;
    } else {
        // nanoBragg.c re-reads the structure factors of an earlier run whenever
        // no -hkl is given, even with -default_F.
        let dump = &inv.outputs.dumpfile;
        if dump.is_file() {
            let grid = nanobragg_core::sf::fdump::read_fdump(dump).map_err(input("-dump"))?;
            inv.config.sf.source = SfSource::Dump(grid);
        }
    }
    if let Some(path) = &inv.mat_path {
        let mat = nanobragg_core::crystal::matfile::read_mat(path).map_err(input("-mat"))?;
        inv.config.crystal.mat = Some(mat);
    }
    if let Some(path) = &inv.source_path {
        let rows = nanobragg_core::source::sourcefile::read_source_file(path)
            .map_err(input("-sourcefile"))?;
        inv.config.beam.sources = Some(rows);
    }
    if let Some(path) = &inv.spectrum_path {
        let lines = nanobragg_core::source::spectrum::read_spectrum_file(path)
            .map_err(input("-spectrum"))?;
        inv.config.beam.spectrum = Some(lines);
    }
    match (&inv.stol, inv.amorphous.take()) {
        (Some((path, flag, to_stol)), sample) => {
            let rows = nanobragg_io::stol::read_stol(path)
                .map_err(|error| CliError::Table { flag: flag.to_string(), error })?;
            let mut sample = sample.unwrap_or_else(|| AmorphousConfig::new(Vec::new(), 1e10));
            sample.rows = rows;
            sample.to_stol = *to_stol;
            inv.config.amorphous = Some(sample);
        }
        (None, Some(_)) => return Err(CliError::Unused {
            what: "-amorphous_*, -density, -MW and -molecules describe the amorphous sample of -stol: give -stol FILE (or -4stol, -Q)".into(),
        }),
        (None, None) => {}
    }
    Ok(())
}

/// Sets `inv`'s structure factors to those of the model at `path`, to
/// `-dmin` or, without it, to the resolution the detector reaches.
fn model_structure_factors(inv: &mut Invocation, path: &Path) -> nanobragg_core::error::Result<()> {
    let (model, group) = crate::model::read(path, inv.space_group.as_deref())?;
    let anomalous = crate::model::anomalous(&inv.anomalous)?;
    let sf = nanobragg_core::model::structure_factors::ModelStructureFactors::new(
        &model, &group, &anomalous,
    )?;
    // the model's cell is the crystal's unless -cell or -mat gives one
    if inv.config.crystal.cell.is_none() && inv.config.crystal.mat.is_none() {
        inv.config.crystal.cell = Some(model.cell);
    }
    // (the geometry only: a placeholder F passes the check for a source)
    let mut cfg = inv.config.clone();
    cfg.sf.source = SfSource::None;
    cfg.sf.default_f = 1.0;
    let exp = nanobragg_core::Experiment::new(&cfg, inv.seeds().setup, None)?;
    let interpolate = inv.config.sf.interpolate.unwrap_or(true);
    let dmin = Some(inv.config.sampling.dmin_a).filter(|d| *d > 0.0);
    let dmin_a = crate::model::render_resolution_a(&exp, interpolate, dmin)
        .ok_or(nanobragg_core::Error::Invalid {
        what: "-dmin",
        msg:
            "the detector gives no resolution limit for the structure factors of -model: give -dmin"
                .into(),
    })?;
    let all = crate::model::structure_factors(&sf, dmin_a)?;
    inv.config.sf.source = SfSource::Hkl(crate::model::entries(&all).into());
    Ok(())
}

/// Pass 1: matches every argument against the table and parses its values.
fn tokenize(args: &[String], warnings: &mut Vec<String>) -> Result<Vec<Occurrence>, CliError> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if !arg.starts_with('-') || arg.len() == 1 || arg.parse::<f64>().is_ok() {
            return Err(CliError::Unexpected { arg: arg.clone() });
        }
        let flag = flags::lookup(arg).ok_or_else(|| CliError::UnknownFlag {
            flag: arg.clone(),
            suggestion: flags::suggest(arg),
        })?;
        let rest = &args[i..];
        let missing = || CliError::MissingValue { flag: arg.clone(), what: flags::needs(flag) };
        // a value that is itself a flag name means the value was left out
        let is_flag = |s: &String| {
            s.starts_with('-') && s.parse::<f64>().is_err() && flags::lookup(s).is_some()
        };
        let raw: &[String] = match flag.arity {
            Arity::Zero => &[],
            Arity::Exactly(n) => {
                if rest.len() < n || rest[..n].iter().any(is_flag) {
                    return Err(missing());
                }
                &rest[..n]
            }
            Arity::Cell => {
                // like nanoBragg.c: up to six values, stopping at one starting with '-'
                let n = rest.iter().take(6).take_while(|s| !s.starts_with('-')).count();
                if n == 0 {
                    return Err(missing());
                }
                &rest[..n]
            }
            Arity::Misset => match rest.first() {
                Some(w) if w.starts_with("rand") => &rest[..1],
                _ if rest.len() >= 3 && !rest[..3].iter().any(is_flag) => &rest[..3],
                _ => return Err(missing()),
            },
        };
        i += raw.len();
        let values = if matches!(flag.arity, Arity::Misset) && raw.len() == 1 {
            vec![Value::Text(raw[0].clone())]
        } else {
            raw.iter()
                .map(|s| parse_value(flag, arg, s, warnings))
                .collect::<Result<Vec<_>, _>>()?
        };
        check_values(flag, arg, raw, &values)?;
        out.push(Occurrence { flag, spelled: arg.clone(), values });
    }
    Ok(out)
}

/// Parses one value according to the flag's [`Kind`].
fn parse_value(
    flag: &'static Flag,
    spelled: &str,
    s: &str,
    warnings: &mut Vec<String>,
) -> Result<Value, CliError> {
    let flag_name = || spelled.to_string();
    match flag.kind {
        Kind::None => unreachable!("{} takes no value", flag.name),
        Kind::Num => parse_num(spelled, s).map(Value::Num),
        Kind::Int => parse_int(spelled, s, warnings).map(Value::Int),
        Kind::InFile => {
            let path = Path::new(s);
            if !path.exists() {
                Err(CliError::MissingFile {
                    flag: flag_name(),
                    path: path.into(),
                    why: "no such file",
                })
            } else if !path.is_file() {
                Err(CliError::MissingFile {
                    flag: flag_name(),
                    path: path.into(),
                    why: "not a regular file",
                })
            } else {
                Ok(Value::Text(s.to_string()))
            }
        }
        // an empty name would write `_00001` under -batch, or fail late
        Kind::OutFile if s.is_empty() => Err(CliError::OutOfRange {
            flag: flag_name(),
            value: s.to_string(),
            why: "the file name is empty".to_string(),
        }),
        Kind::OutFile => Ok(Value::Text(s.to_string())),
        Kind::Word(choices) => {
            if choices.is_empty() || choices.contains(&s) {
                Ok(Value::Text(s.to_string()))
            } else {
                Err(CliError::BadChoice {
                    flag: flag_name(),
                    value: s.to_string(),
                    choices: choices.join(", "),
                })
            }
        }
        Kind::AbsDepth => {
            let t = s.trim();
            if t.eq_ignore_ascii_case("inf") || t.eq_ignore_ascii_case("infinity") {
                return Ok(Value::Depth(None));
            }
            let v = parse_num(spelled, s)?;
            Ok(Value::Depth(if v == 0.0 { None } else { Some(v) }))
        }
    }
}

/// Parses a finite floating-point number (no trailing text, unlike C `atof`).
fn parse_num(spelled: &str, s: &str) -> Result<f64, CliError> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() => Ok(v),
        Ok(v) if v.is_infinite() => Err(CliError::OutOfRange {
            flag: spelled.to_string(),
            value: s.to_string(),
            why: "must be finite".to_string(),
        }),
        _ => Err(CliError::NotANumber { flag: spelled.to_string(), value: s.to_string() }),
    }
}

/// Parses an integer the way nanoBragg.c's `atoi` reads it where that is
/// unambiguous: `5` is 5 and `5.7` is 5 (with a warning). A value whose `atoi`
/// reading differs from its numeric value (`1e3`, which `atoi` reads as 1) is
/// an error rather than a silent surprise.
fn parse_int(spelled: &str, s: &str, warnings: &mut Vec<String>) -> Result<i64, CliError> {
    let t = s.trim();
    if let Ok(v) = t.parse::<i64>() {
        return Ok(v);
    }
    let bad = || CliError::NotAnInteger { flag: spelled.to_string(), value: s.to_string() };
    let v = t.parse::<f64>().map_err(|_| bad())?;
    if !v.is_finite() || v.abs() >= 9.0e18 {
        return Err(bad());
    }
    // the integer prefix atoi would read
    let sign_len = usize::from(t.starts_with(['+', '-']));
    let digits = t[sign_len..].bytes().take_while(u8::is_ascii_digit).count();
    let prefix = &t[..sign_len + digits];
    let atoi = if digits == 0 { 0 } else { prefix.parse::<i64>().map_err(|_| bad())? };
    if atoi as f64 != v.trunc() {
        return Err(bad());
    }
    warnings.push(format!(
        "{spelled}: '{}' is not an integer; using {atoi}, as nanoBragg does",
        shown(s)
    ));
    Ok(atoi)
}

/// Whether `value` may be value `index` (0 the first) of `flag`, by the
/// flag's [`Check`] as the parser applies it (the other values taken as
/// allowed ones): for a value given otherwise than on a command line, such
/// as one set by name from Python. `flag` must be a known flag.
pub fn check_flag_number(flag: &str, index: usize, value: f64) -> Result<(), CliError> {
    let Some(f) = crate::flags::lookup(flag) else {
        panic!("check_flag_number: {flag} is not a flag");
    };
    if !value.is_finite() {
        return Err(CliError::NotANumber { flag: flag.into(), value: format!("{value:?}") });
    }
    // (the cell's other values: an edge of 1 Å, a right angle)
    let allowed = |k: usize| if f.check == Check::Cell && k >= 3 { 90.0 } else { 1.0 };
    let nums: Vec<f64> = (0..=index).map(|k| if k == index { value } else { allowed(k) }).collect();
    let raw: Vec<String> = nums.iter().map(|x| format!("{x:?}")).collect();
    let values: Vec<Value> = nums.iter().map(|&x| Value::Num(x)).collect();
    check_values(f, flag, &raw, &values)
}

/// Checks the parsed values against the flag's [`Check`].
fn check_values(
    flag: &'static Flag,
    spelled: &str,
    raw: &[String],
    values: &[Value],
) -> Result<(), CliError> {
    let fail = |value: &str, why: &str| {
        Err(CliError::OutOfRange {
            flag: spelled.to_string(),
            value: value.to_string(),
            why: why.to_string(),
        })
    };
    let num = |v: &Value| match v {
        Value::Num(x) => Some(*x),
        Value::Int(x) => Some(*x as f64),
        Value::Depth(x) => *x,
        Value::Text(_) => None,
    };
    match flag.check {
        Check::Any => {}
        Check::Positive | Check::NonNegative => {
            for (r, v) in raw.iter().zip(values) {
                if let Some(x) = num(v) {
                    if flag.check == Check::Positive && x <= 0.0 {
                        return fail(r, "must be > 0");
                    }
                    if flag.check == Check::NonNegative && x < 0.0 {
                        return fail(r, "must be >= 0");
                    }
                }
            }
        }
        Check::AtMost(n) => {
            for (r, v) in raw.iter().zip(values) {
                if num(v).is_some_and(|x| !(0.0..=n as f64).contains(&x)) {
                    return fail(r, &format!("must be from 0 to {n}"));
                }
            }
        }
        Check::NonZeroVector => {
            if values.iter().all(|v| num(v) == Some(0.0)) {
                return fail(&raw.join(" "), "the zero vector has no direction");
            }
        }
        Check::Cell => {
            for (k, (r, v)) in raw.iter().zip(values).enumerate() {
                let x = num(v).unwrap_or(f64::NAN);
                if k == 0 && x <= 0.0 {
                    return fail(r, "the cell edge a must be > 0");
                }
                if k < 3 && x < 0.0 {
                    return fail(r, "cell edges must be >= 0 (0 means: same as a)");
                }
                if k >= 3 && !(0.0..180.0).contains(&x) {
                    return fail(r, "cell angles must be >= 0 and < 180 deg (0 means: 90)");
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use nanobragg_core::config::{Convention, CrystalShape, Misset, Pivot};
    use nanobragg_core::render::Precision;
    use std::path::PathBuf;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    /// Parses with `-dump` pointed at a file that never exists, so a stray
    /// Fdump.bin in the test's working directory cannot interfere.
    fn parse(s: &str) -> Result<Invocation, CliError> {
        let mut a = args(s);
        a.extend(args("-dump /nonexistent/nanobragg-test/Fdump.bin"));
        parse_args(&a)
    }

    fn ok(s: &str) -> Invocation {
        parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn err(s: &str) -> String {
        match parse(s) {
            Ok(_) => panic!("{s}: expected an error"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_number_given_alone_is_checked_by_its_flags_rule() {
        let msg = |f: &str, i: usize, v: f64| check_flag_number(f, i, v).unwrap_err().to_string();
        assert_eq!(msg("-distance", 0, -5.0), "-distance: '-5.0' is not allowed (must be > 0)");
        assert!(check_flag_number("-distance", 0, 1e-300).is_ok());
        assert!(msg("-fluence", 0, -1e-20).contains("must be >= 0"));
        assert!(msg("-polar", 0, f64::NAN).contains("'NaN' is not a number"));
        assert!(check_flag_number("-polar", 0, -3.0).is_ok());
        // the cell's rule by place: an angle of 180 is refused, an edge of 180 is not
        assert!(msg("-cell", 5, 180.0).contains("cell angles must be"));
        assert!(check_flag_number("-cell", 2, 180.0).is_ok());
        assert!(msg("-cell", 0, 0.0).contains("the cell edge a must be > 0"));
    }

    /// A scratch directory unique to this test.
    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nanobragg-parse-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn defaults() {
        let inv = ok("");
        assert_eq!(inv.config.detector, Default::default());
        let dump = PathBuf::from("/nonexistent/nanobragg-test/Fdump.bin");
        assert_eq!(inv.outputs, Outputs { dumpfile: dump, ..Outputs::default() });
        assert_eq!(Outputs::default().dumpfile, PathBuf::from("Fdump.bin"));
        assert!(inv.outputs.write_pgm && inv.outputs.calculate_noise);
        assert_eq!(inv.seed, None);
        assert_eq!(inv.progress, None);
        assert_eq!(inv.threads, 0);
        assert_eq!(inv.device, Device::Cpu);
        assert_eq!(inv.precision, Precision::Fast64);
        assert!(!inv.help);
    }

    #[test]
    fn help_anywhere() {
        for s in ["-h", "--help", "-help", "-distance 10 -h", "-bogus --help"] {
            assert!(parse_args(&args(s)).unwrap().help, "{s}");
        }
    }

    #[test]
    fn pivot_last_wins() {
        assert_eq!(ok("-Xclose 5").config.detector.pivot, Pivot::Sample);
        assert_eq!(ok("-Xclose 5 -distance 90").config.detector.pivot, Pivot::Beam);
        assert_eq!(ok("-distance 90 -Xclose 5").config.detector.pivot, Pivot::Sample);
        assert_eq!(ok("-twotheta 20 -Ybeam 30").config.detector.pivot, Pivot::Beam);
        assert_eq!(ok("-Ybeam 30 -twotheta 20").config.detector.pivot, Pivot::Sample);
        assert_eq!(ok("-ORGX 512 -pivot beam").config.detector.pivot, Pivot::Beam);
        assert_eq!(ok("-pivot beam -ORGY 512").config.detector.pivot, Pivot::Sample);
        assert_eq!(ok("-close_distance 80").config.detector.pivot, Pivot::Sample);
        assert_eq!(ok("-pivot sample").config.detector.pivot, Pivot::Sample);
        // conventions set the pivot as nanoBragg.c does
        assert_eq!(ok("-xds").config.detector.pivot, Pivot::Sample);
        assert_eq!(ok("-xds -Xbeam 3").config.detector.pivot, Pivot::Beam);
        assert_eq!(ok("-Xclose 3 -mosflm").config.detector.pivot, Pivot::Beam);
        assert_eq!(ok("-Xclose 3 -adxv").config.detector.pivot, Pivot::Beam);
        assert_eq!(ok("-Xclose 3 -denzo").config.detector.pivot, Pivot::Beam);
        assert_eq!(ok("-Xclose 3 -dials").config.detector.pivot, Pivot::Beam);
    }

    #[test]
    fn convention_and_custom_vectors() {
        assert_eq!(ok("-xds").config.detector.convention, Convention::Xds);
        assert_eq!(ok("-dials").config.detector.convention, Convention::Dials);
        assert_eq!(ok("-denzo").config.detector.convention, Convention::Denzo);
        assert_eq!(ok("-adxv -mosflm").config.detector.convention, Convention::Mosflm);
        for v in [
            "-fdet_vector",
            "-sdet_vector",
            "-odet_vector",
            "-beam_vector",
            "-polar_vector",
            "-spindle_axis",
            "-twotheta_axis",
            "-pix0_vector",
        ] {
            let inv = ok(&format!("-xds {v} 0 1 0"));
            assert_eq!(inv.config.detector.convention, Convention::Custom, "{v}");
            // a convention flag after the vector wins again
            assert_eq!(ok(&format!("{v} 0 1 0 -xds")).config.detector.convention, Convention::Xds);
        }
        let d = ok("-fdet_vector 0 0 -1 -twotheta_axis 1 0 0 -pix0_vector 0.1 -0.05 0.05")
            .config
            .detector;
        assert_eq!(d.fdet, [0.0, 0.0, -1.0]);
        assert_eq!(d.twotheta_axis, [1.0, 0.0, 0.0]);
        assert_eq!(d.pix0, Some([0.1, -0.05, 0.05]));
        // exact matching: -twotheta_axis does not set the two-theta angle or the pivot
        assert_eq!(d.twotheta_deg, 0.0);
        assert_eq!(d.pivot, Pivot::Beam);
    }

    #[test]
    fn noise_and_pgm_order() {
        assert!(!ok("-noisefile n.img -nonoise").outputs.calculate_noise);
        let o = ok("-nonoise -noisefile n.img").outputs;
        assert!(o.calculate_noise);
        assert_eq!(o.noisefile, PathBuf::from("n.img"));
        assert!(!ok("-pgmfile p.pgm -nopgm").outputs.write_pgm);
        assert!(ok("-nopgm -pgmfile p.pgm").outputs.write_pgm);
        assert!(ok("-nopgm -pgmscale 2").outputs.write_pgm);
        assert!(!ok("-noiseimage n.img -nonoise").outputs.calculate_noise);
    }

    #[test]
    fn outputs_and_aliases() {
        let o = ok("-floatimage f.bin -intimage i.img -pgmimage p.pgm -scale 3 -pgmscale 4 -adc 10 -dump d.bin")
            .outputs;
        assert_eq!(o.floatfile, PathBuf::from("f.bin"));
        assert_eq!(o.intfile, PathBuf::from("i.img"));
        assert_eq!(o.pgmfile, PathBuf::from("p.pgm"));
        // -pgmscale does not also set the integer scale (exact matching)
        assert_eq!((o.int_scale, o.pgm_scale, o.adc_offset), (3.0, 4.0, 10.0));
        // parse() appends its own -dump, which comes last and wins
        assert_eq!(o.dumpfile, PathBuf::from("/nonexistent/nanobragg-test/Fdump.bin"));
    }

    #[test]
    fn energy_and_lambda() {
        let l = ok("-energy 12398.42").config.beam.lambda_a;
        assert!((l - 1.0).abs() < 1e-15);
        assert_eq!(ok("-energy 12398.42 -wave 1.5").config.beam.lambda_a, 1.5);
        assert!((ok("-lambda 2 -energy 6199.21").config.beam.lambda_a - 2.0).abs() < 1e-12);
        assert_eq!(ok("-wavelength 0.9").config.beam.lambda_a, 0.9);
        assert!(err("-energy 0").contains("-energy"));
        assert!(err("-lambda -1").contains("must be > 0"));
    }

    #[test]
    fn cell_values() {
        assert_eq!(ok("-cell 50").config.crystal.cell, Some([50.0, 0.0, 0.0, 0.0, 0.0, 0.0]));
        assert_eq!(
            ok("-cell 50 60 70").config.crystal.cell,
            Some([50.0, 60.0, 70.0, 0.0, 0.0, 0.0])
        );
        assert_eq!(
            ok("-cell 50 60 70 80 90 100").config.crystal.cell,
            Some([50.0, 60.0, 70.0, 80.0, 90.0, 100.0])
        );
        // stops at a value starting with '-': the next flag is parsed normally
        let inv = ok("-cell 50 60 -N 3");
        assert_eq!(inv.config.crystal.cell, Some([50.0, 60.0, 0.0, 0.0, 0.0, 0.0]));
        assert_eq!(inv.config.crystal.na, 3.0);
        // a later partial -cell keeps the earlier values it does not replace (as in C)
        assert_eq!(
            ok("-cell 50 60 70 80 90 100 -cell 40").config.crystal.cell,
            Some([40.0, 60.0, 70.0, 80.0, 90.0, 100.0])
        );
        assert!(err("-cell").contains("-cell needs"));
        assert!(err("-cell -N 3").contains("-cell needs"));
        assert!(err("-cell 0").contains("'0' is not allowed"));
        assert!(err("-cell 50 60 70 90 90 190").contains("190"));
        // a negative value ends the cell and is then an unexpected argument
        assert!(err("-cell 50 60 70 -90 90 90").contains("unexpected argument '-90'"));
    }

    #[test]
    fn misset_forms() {
        assert_eq!(ok("-misset random").config.crystal.misset, Misset::Random);
        assert_eq!(ok("-misset rand").config.crystal.misset, Misset::Random);
        assert_eq!(
            ok("-misset 10 -20 30.5").config.crystal.misset,
            Misset::Angles([10.0, -20.0, 30.5])
        );
        assert_eq!(
            ok("-misset random -misset 1 2 3").config.crystal.misset,
            Misset::Angles([1.0, 2.0, 3.0])
        );
        // -misset_seed is its own flag, not three misset angles
        let c = ok("-misset_seed 7 -misset random").config.crystal;
        assert_eq!(c.misset_seed, Some(7));
        assert_eq!(c.misset, Misset::Random);
        assert!(err("-misset 1 2").contains("-misset needs"));
        assert!(err("-misset foo 1 2").contains("'foo' is not a number"));
        assert!(err("-misset").contains("-misset needs"));
    }

    #[test]
    fn integers_like_atoi() {
        let inv = ok("-N 5.7");
        assert_eq!(
            (inv.config.crystal.na, inv.config.crystal.nb, inv.config.crystal.nc),
            (5.0, 5.0, 5.0)
        );
        assert_eq!(inv.warnings.len(), 1);
        assert!(inv.warnings[0].contains("-N"));
        assert_eq!(ok("-N 3 -Nb 7").config.crystal.nb, 7.0);
        assert_eq!(ok("-N 0").config.crystal.na, 0.0);
        assert!(err("-N -1").contains("must be >= 0"));
        assert!(err("-N abc").contains("'abc' is not an integer"));
        assert!(err("-N 1e3").contains("not an integer"));
        assert!(err("-Na nan").contains("not an integer"));
        let inv = ok("-detpixels 512 -detpixels_x 256");
        assert_eq!((inv.config.detector.fpixels, inv.config.detector.spixels), (256, 512));
        assert!(err("-detpixels -5").contains("-detpixels"));
        assert!(err("-detpixels_s 0").contains("must be > 0"));
        assert_eq!(ok("-roi 0 10 -1 20").config.detector.roi, Some([0, 10, -1, 20]));
        let inv = ok("-printout_pixel 3 4");
        assert_eq!(inv.printout_pixel, Some((3, 4)));
        assert!(inv.printout);
    }

    #[test]
    fn seeds() {
        let inv = ok("-seed -12 -mosaic_seed 99");
        assert_eq!(inv.seed, Some(-12));
        assert_eq!(inv.config.crystal.mosaic_seed, 99);
        assert_eq!(inv.config.crystal.misset_seed, None);
    }

    #[test]
    fn detector_values() {
        let d = ok("-pixel 0.172 -detsize 100 -detsize_s 50 -distance 250 -Xbeam 10 -Ybeam 20 -Xclose 1 -Yclose 2 \
                    -ORGX 100.5 -ORGY 200.5 -detector_rotx 1 -detector_roty 2 -detector_rotz 3 -twotheta 15 \
                    -detector_thick 320 -thicksteps 4 -curved_det -point_pixel -close_distance 240")
            .config
            .detector;
        assert_eq!(d.pixel_mm, 0.172);
        assert_eq!((d.detsize_f_mm, d.detsize_s_mm), (100.0, 50.0));
        assert_eq!((d.distance_mm, d.close_distance_mm), (250.0, Some(240.0)));
        assert_eq!(
            (d.xbeam_mm, d.ybeam_mm, d.xclose_mm, d.yclose_mm),
            (Some(10.0), Some(20.0), Some(1.0), Some(2.0))
        );
        assert_eq!((d.orgx_px, d.orgy_px), (Some(100.5), Some(200.5)));
        assert_eq!((d.rotx_deg, d.roty_deg, d.rotz_deg, d.twotheta_deg), (1.0, 2.0, 3.0, 15.0));
        assert_eq!((d.thick_um, d.thicksteps, d.curved, d.point_pixel), (320.0, 4, true, true));
        assert!(err("-pixel 0").contains("-pixel: '0' is not allowed (must be > 0)"));
        assert!(err("-distance 0").contains("-distance"));
        assert!(err("-distance abc").contains("-distance: 'abc' is not a number"));
        assert!(err("-distance inf").contains("must be finite"));
        assert!(err("-distance nan").contains("not a number"));
        assert!(err("-pivot middle").contains("'middle' is not one of"));
    }

    #[test]
    fn detector_absorption() {
        assert_eq!(ok("-detector_abs 500").config.detector.attenuation_um, Some(Some(500.0)));
        assert_eq!(ok("-detector_absorb inf").config.detector.attenuation_um, Some(None));
        assert_eq!(ok("-detector_absorption 0").config.detector.attenuation_um, Some(None));
        // "inf" or 0 also zeroes the thickness given before it, as in C
        assert_eq!(ok("-detector_thick 100 -detector_abs inf").config.detector.thick_um, 0.0);
        assert_eq!(ok("-detector_abs inf -detector_thick 100").config.detector.thick_um, 100.0);
        assert_eq!(ok("-detector_thick 100 -detector_abs 50").config.detector.thick_um, 100.0);
        assert!(err("-detector_abs -3").contains("must be >= 0"));
        assert!(err("-detector_abs thick").contains("not a number"));
    }

    #[test]
    fn crystal_sizes_and_shapes() {
        let c = ok("-xtalsize 0.1 -sample_y 0.2 -heigh 0.3").config.crystal;
        assert_eq!(c.size_mm, [0.1, 0.2, 0.3]);
        let c = ok("-sample_thick 1 -xtal_width 2 -xtal_height 3 -samplesize 4 -width 5")
            .config
            .crystal;
        assert_eq!(c.size_mm, [4.0, 5.0, 4.0]);
        assert_eq!(ok("-round_xtal").config.crystal.shape, CrystalShape::Round);
        assert_eq!(ok("-gauss_xtal").config.crystal.shape, CrystalShape::Gauss);
        assert_eq!(ok("-binary_spots").config.crystal.shape, CrystalShape::Tophat);
        assert_eq!(ok("-tophat_spots -square_xtal").config.crystal.shape, CrystalShape::Square);
        let c =
            ok("-mosaicity 0.5 -mosaic_dom 10 -phi 5 -osc 1 -phistep 0.1 -phisteps 10 -fudge 2")
                .config
                .crystal;
        assert_eq!(
            (
                c.mosaic_deg,
                c.mosaic_domains,
                c.phi0_deg,
                c.osc_deg,
                c.phistep_deg,
                c.phisteps,
                c.fudge
            ),
            (0.5, 10, 5.0, 1.0, 0.1, 10, 2.0)
        );
        assert_eq!(ok("-mosaic_spread 2").config.crystal.mosaic_deg, 2.0);
        assert_eq!(ok("-spindle_axis 0 1 0").config.detector.spindle, [0.0, 1.0, 0.0]);
        assert!(err("-spindle_axis 0 0 0").contains("zero vector"));
    }

    #[test]
    fn beam_values() {
        let b = ok("-fluence 1e20 -flux 1e12 -exposure 2 -beamsize 0.05 -polar 0.9 -divergence 2 -hdivstep 0.5 \
                    -vdivrange 3 -divsteps 4 -hdivsteps 5 -square_div -dispersion 1 -dispsteps 3 -source_distance 5000")
            .config
            .beam;
        assert_eq!((b.fluence, b.flux, b.exposure_s, b.beamsize_mm), (1e20, 1e12, 2.0, 0.05));
        assert_eq!((b.kahn_factor, b.nopolar), (0.9, false));
        assert_eq!(
            (b.hdivrange_mrad, b.vdivrange_mrad, b.hdivstep_mrad, b.vdivstep_mrad),
            (2.0, 3.0, 0.5, -1.0)
        );
        assert_eq!((b.hdivsteps, b.vdivsteps, b.round_div), (5, 4, false));
        assert_eq!((b.dispersion_pct, b.dispsteps), (1.0, 3));
        assert!((b.source_distance_m - 5.0).abs() < 1e-15);
        assert!(ok("-polar 0.5 -nopolar").config.beam.nopolar);
        assert!(!ok("-nopolar -polar 0.5").config.beam.nopolar);
    }

    #[test]
    fn sampling_and_misc() {
        let inv = ok("-oversample 3 -oversample_omega -oversample_polar -oversample_thick -dmin 2 -water 100 \
                      -corrected -interpolate -progress -threads 4 -dtype float32 -device cpu -printout");
        let s = &inv.config.sampling;
        assert_eq!(
            (s.oversample, s.oversample_omega, s.oversample_polar, s.oversample_thick),
            (3, true, true, true)
        );
        assert_eq!((s.dmin_a, s.water_um, s.corrected), (2.0, 100.0, true));
        assert_eq!(inv.config.sf.interpolate, Some(true));
        assert_eq!(inv.progress, Some(true));
        assert_eq!(
            (inv.threads, inv.precision, inv.device, inv.printout),
            (4, Precision::Fast32, Device::Cpu, true)
        );
        let inv = ok("-nointerpolate -noprogress -device cuda -default_F 100");
        assert_eq!(inv.config.sf.interpolate, Some(false));
        assert_eq!(inv.progress, Some(false));
        assert_eq!(inv.device, Device::Cuda);
        assert_eq!(inv.config.sf.default_f, 100.0);
        assert!(err("-dtype float16").contains("float64, float32"));
        assert!(err("-threads -1").contains("-threads"));
        // huge thread counts only exhaust the machine
        assert_eq!(ok("-threads 1024").threads, 1024);
        assert!(err("-threads 1025").contains("must be from 0 to 1024"));
        assert!(err("-threads 9223372036854775807").contains("must be from 0 to 1024"));
    }

    #[test]
    fn precision_from_dtype_and_exact() {
        for (flags, precision) in [
            ("-exact", Precision::Exact64),
            ("-dtype float64", Precision::Fast64),
            ("-exact -dtype float64", Precision::Exact64),
            ("-dtype float64 -exact", Precision::Exact64),
            // f32 wins over -exact in either order (there is no exact f32)
            ("-exact -dtype float32", Precision::Fast32),
            ("-dtype float32 -exact", Precision::Fast32),
            ("-dtype float32 -dtype float64", Precision::Fast64),
        ] {
            assert_eq!(ok(flags).precision, precision, "{flags}");
        }
    }

    #[test]
    fn ignored_flags_warn() {
        // (-stol and the amorphous sample's flags act: crates/cli/tests/stol.rs)
        let inv = ok("-coherent -stolout c");
        assert_eq!(inv.warnings.len(), 2);
        assert!(inv.warnings.iter().all(|w| w.contains("has no effect in nanoBragg; ignored")));
        assert!(inv.warnings[0].contains("-coherent"));
    }

    #[test]
    fn argument_errors() {
        assert_eq!(err("-distanse 100"), "unknown flag -distanse (did you mean -distance?)");
        assert!(err("--distance 100").contains("did you mean -distance?"));
        assert!(err("-xbeam 10").contains("did you mean -Xbeam?"));
        assert!(err("-zzzzzzzzzzzz").contains("run nanobragg -h"));
        assert_eq!(err("-distance"), "-distance needs a value (mm)");
        assert!(err("-distance -Xbeam 5").contains("-distance needs a value"));
        assert!(err("-roi 1 2 3").contains("-roi needs 4 values"));
        assert!(err("-fdet_vector 1 0").contains("-fdet_vector needs 3 values"));
        assert!(err("100").contains("unexpected argument '100'"));
        assert!(err("-N 3 extra").contains("unexpected argument 'extra'"));
        assert!(err("-").contains("unexpected argument '-'"));
        assert!(err("-hkl /nonexistent/x.hkl")
            .contains("-hkl: cannot open '/nonexistent/x.hkl': no such file"));
        assert!(err("-mat /").contains("not a regular file"));
        assert!(err("-hkl -mat").contains("-hkl needs a value"));
    }

    #[test]
    fn smv_header_applied_before_flags() {
        let dir = scratch("smv");
        let write = |name: &str, header_keys: &str, w: usize, h: usize| {
            let mut head = format!("{{\nHEADER_BYTES=  512;\nDIM=2;\nBYTE_ORDER=little_endian;\nTYPE=unsigned_short;\nSIZE1={w};\nSIZE2={h};\n{header_keys}}}\x0c");
            while head.len() < 512 {
                head.push(' ');
            }
            let mut bytes = head.into_bytes();
            for i in 0..w * h {
                bytes.extend_from_slice(&((i % 2) as u16).to_le_bytes());
            }
            let p = dir.join(name);
            std::fs::write(&p, bytes).unwrap();
            p
        };
        let img = write(
            "a.img",
            "PIXEL_SIZE=0.2;\nDISTANCE=150;\nCLOSE_DISTANCE=140;\nWAVELENGTH=1.5;\nBEAM_CENTER_X=3;\nBEAM_CENTER_Y=4;\nXDS_ORGX=15;\nXDS_ORGY=20;\nPHI=10;\nOSC_START=10;\nOSC_RANGE=0.5;\nTWOTHETA=7;\n",
            30,
            20,
        );
        let inv = ok(&format!("-img {}", img.display()));
        let d = &inv.config.detector;
        assert_eq!((d.fpixels, d.spixels, d.pixel_mm), (30, 20, 0.2));
        assert!((d.detsize_f_mm - 6.0).abs() < 1e-12 && (d.detsize_s_mm - 4.0).abs() < 1e-12);
        // DISTANCE picks up CLOSE_DISTANCE's value (last substring match), as in C
        assert_eq!((d.distance_mm, d.close_distance_mm), (140.0, Some(140.0)));
        assert_eq!(
            (d.xbeam_mm, d.ybeam_mm, d.orgx_px, d.orgy_px),
            (Some(3.0), Some(4.0), Some(15.0), Some(20.0))
        );
        assert_eq!(d.twotheta_deg, 0.0);
        assert_eq!(d.pivot, Pivot::Beam);
        assert_eq!(d.mask, None);
        assert_eq!(inv.config.beam.lambda_a, 1.5);
        assert_eq!((inv.config.crystal.phi0_deg, inv.config.crystal.osc_deg), (10.0, 0.5));
        assert_eq!(inv.img_path, Some(img.clone()));

        // explicit flags win even when they come before -img
        let inv = ok(&format!("-distance 99 -pixel 0.1 -img {}", img.display()));
        assert_eq!((inv.config.detector.distance_mm, inv.config.detector.pixel_mm), (99.0, 0.1));

        // a mask: pixels kept, BEAM_CENTER_Y measured from the other edge; -img wins over it
        let mask = write("m.img", "PIXEL_SIZE=0.5;\nBEAM_CENTER_Y=1;\nWAVELENGTH=2;\n", 4, 3);
        let inv = ok(&format!("-mask {}", mask.display()));
        let d = &inv.config.detector;
        assert_eq!(d.mask, Some(vec![0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1]));
        assert_eq!((d.fpixels, d.spixels), (4, 3));
        assert_eq!(d.ybeam_mm, Some(1.5 - 1.0));
        assert_eq!(inv.mask_path, Some(mask.clone()));
        let inv = ok(&format!("-img {} -mask {}", img.display(), mask.display()));
        assert_eq!(inv.config.beam.lambda_a, 1.5);
        assert_eq!(inv.config.detector.fpixels, 30);
        assert_eq!(inv.config.detector.mask.as_ref().map(Vec::len), Some(12));

        // a header value gets the check of the flag it stands for
        for (keys, needle) in [
            (
                "CLOSE_DISTANCE=-85;\nDISTANCE=100;\n",
                "header CLOSE_DISTANCE=-85 is not allowed (must be > 0, as for -close_distance)",
            ),
            ("PHI=inf;\n", "header PHI=inf is not allowed (must be finite, as for -phi)"),
            (
                "OSC_RANGE=-inf;\n",
                "header OSC_RANGE=-inf is not allowed (must be finite, as for -osc)",
            ),
            ("WAVELENGTH=0;\n", "header WAVELENGTH=0 is not allowed (must be > 0, as for -lambda)"),
        ] {
            let bad = write("bad.img", keys, 4, 3);
            for flag in ["-img", "-mask"] {
                let e = err(&format!("{flag} {}", bad.display()));
                assert!(e.starts_with(&format!("{flag} ")) && e.contains("bad.img"), "{e}");
                assert!(e.contains(needle), "{e}");
            }
        }
        // a value a flag replaces is never used: not checked (as in nanoBragg.c)
        let bad = write("bad.img", "WAVELENGTH=0;\n", 4, 3);
        assert_eq!(
            ok(&format!("-img {} -energy 12398.42", bad.display())).config.beam.lambda_a,
            1.0
        );
        assert_eq!(ok(&format!("-lambda 2 -mask {}", bad.display())).config.beam.lambda_a, 2.0);
        // nor a mask header value the -img header replaces
        let inv = ok(&format!("-mask {} -img {}", bad.display(), img.display()));
        assert_eq!(inv.config.beam.lambda_a, 1.5);
        // a NaN is no value, as an absent key
        let nan = write("nan.img", "PHI=nan;\n", 4, 3);
        assert_eq!(ok(&format!("-img {}", nan.display())).config.crystal.phi0_deg, 0.0);

        // an unreadable image names the flag
        let junk = dir.join("junk.img");
        std::fs::write(&junk, b"not an image").unwrap();
        assert!(err(&format!("-img {}", junk.display())).starts_with("-img: "));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn mat_and_source_files() {
        let dir = scratch("files");
        let mat = dir.join("a.mat");
        std::fs::write(&mat, " 1 2 3\n 4 5 6\n 7 8 9\n 0 0 0\n 1 1 1\n").unwrap();
        let src = dir.join("s.txt");
        std::fs::write(&src, "-10 0 0 1 1e-10\n\n-10,0.1,0 2\n").unwrap();
        let inv = ok(&format!("-mat {} -sourcefile {}", mat.display(), src.display()));
        assert_eq!(
            inv.config.crystal.mat,
            Some([[1.0, 4.0, 7.0], [2.0, 5.0, 8.0], [3.0, 6.0, 9.0]])
        );
        // nanoBragg.c's README and the PyTorch port spell it -matrix
        let matrix = ok(&format!("-matrix {}", mat.display()));
        assert_eq!(matrix.config.crystal.mat, inv.config.crystal.mat);
        let rows = inv.config.beam.sources.unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0], [-10.0, 0.0, 0.0, 1.0, 1e-10]);
        assert_eq!(rows[1][..4], [-10.0, 0.1, 0.0, 2.0]);
        assert!(rows[1][4].is_nan());
        assert_eq!(inv.mat_path, Some(mat));
        let bad = dir.join("bad.mat");
        std::fs::write(&bad, "1 2 3\n4 5 6\n").unwrap();
        assert!(err(&format!("-mat {}", bad.display())).starts_with("-mat: "));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn structure_factor_sources() {
        let dir = scratch("sf");
        let hkl = dir.join("f.hkl");
        std::fs::write(&hkl, "0 0 1 10\n1 0 0 20\n").unwrap();
        let dump = dir.join("Fdump.bin");
        let dump_arg = format!("-dump {}", dump.display());

        // -hkl is read; an existing dump file is then not looked at
        std::fs::write(&dump, b"garbage").unwrap();
        let inv = parse_args(&args(&format!("-hkl {} {dump_arg}", hkl.display()))).unwrap();
        match &inv.config.sf.source {
            SfSource::Hkl(e) => assert_eq!(e.len(), 2),
            other => panic!("{other:?}"),
        }
        assert_eq!(inv.hkl_path, Some(hkl.clone()));

        // without -hkl, an existing dump file is read even with -default_F (as in C)
        let SfSource::Hkl(entries) = inv.config.sf.source else { unreachable!() };
        let grid = nanobragg_core::sf::HklGrid::from_entries(&entries, 0.0).unwrap();
        let mut bytes = Vec::new();
        nanobragg_core::sf::fdump::write_fdump_to(&mut bytes, &grid).unwrap();
        std::fs::write(&dump, bytes).unwrap();
        let inv = parse_args(&args(&format!("-default_F 5 {dump_arg}"))).unwrap();
        assert_eq!(inv.config.sf.source, SfSource::Dump(grid));

        // an unreadable dump file is an error naming -dump
        std::fs::write(&dump, b"garbage").unwrap();
        match parse_args(&args(&format!("-default_F 5 {dump_arg}"))) {
            Err(e @ CliError::Input { .. }) => assert!(e.to_string().starts_with("-dump: "), "{e}"),
            other => panic!("{other:?}"),
        }

        // no dump file: nothing
        std::fs::remove_file(&dump).unwrap();
        let inv = parse_args(&args(&format!("-default_F 5 {dump_arg}"))).unwrap();
        assert_eq!(inv.config.sf.source, SfSource::None);

        // a malformed hkl file names -hkl and the file
        std::fs::write(&hkl, "0 0 1\n").unwrap();
        let e = err(&format!("-hkl {}", hkl.display()));
        assert!(e.starts_with("-hkl: ") && e.contains("f.hkl"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
