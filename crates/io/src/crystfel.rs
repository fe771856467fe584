//! CrystFEL geometry files (`.geom`): the panels of a detector, placed in
//! the DIALS laboratory frame.
//!
//! CrystFEL's frame has +z along the beam (away from the source) and +y up;
//! DIALS's has the beam along −z and +y up, so a CrystFEL (x, y, z) is the
//! DIALS (−x, y, −z) (a half turn about y). A panel's first pixel corner is
//! (`corner_x`, `corner_y`) pixels and `clen` + `coffset` metres along z,
//! its axes `fs` and `ss` (`+1.0x -0.02y +0.0z`), its pixel 1/`res` m, its
//! size `max − min + 1` pixels along fs and ss (`clen`/`coffset` in m, or
//! mm with the unit; `photon_energy` in eV or keV). Keys without a panel
//! name are defaults for every panel. `wavelength`, `electron_voltage` and
//! `detector_shift_*` are refused (not read). Keys that describe the data file's layout
//! or masks (`data`, `dim*`, `mask*`, `bad_*`, `rigid_group*`, `adu_per_*`,
//! `max_adu`, `flag_*`, ...) do not change the simulation and are skipped.
//! A key that is none of CrystFEL's (`coner_x`) is skipped with a warning.

use crate::expt::Panel;
use crate::{read_all, IoError};
use std::collections::BTreeMap;
use std::path::Path;

/// A detector from a geometry file.
#[derive(Debug, Clone, PartialEq)]
pub struct Geometry {
    /// The panels in the DIALS frame, in the file's order of first mention.
    pub panels: Vec<Panel>,
    /// `photon_energy` (eV), where the file gives a number.
    pub photon_energy_ev: Option<f64>,
    /// `photon_energy` where the file names a path into the data file (the
    /// wavelength then comes from the flags).
    pub photon_energy_path: Option<String>,
    /// Lines whose key is none of CrystFEL's (a misspelling, most likely),
    /// skipped: one message each, naming the line.
    pub warnings: Vec<String>,
}

/// The keys this reader places the panels and the beam with.
const READ: [&str; 13] = [
    "min_fs",
    "max_fs",
    "min_ss",
    "max_ss",
    "corner_x",
    "corner_y",
    "fs",
    "ss",
    "res",
    "clen",
    "coffset",
    "photon_energy",
    "photon_energy_scale",
];

/// CrystFEL's other keys, which describe the data file, masks, detector
/// response, peaks or panel groups; with `dim0`, `dim1`, ..., `mask0_data`
/// and the like, `rigid_group_*` and `group_*` ([`crystfel_key`]).
/// `clen_for_centering` (CrystFEL 0.9's rail correction, which moves the
/// panels along `rail_direction`) is skipped with a warning.
const SKIPPED: [&str; 24] = [
    "data",
    "mask",
    "mask_file",
    "mask_good",
    "mask_bad",
    "mask_edge_pixels",
    "saturation_map",
    "saturation_map_file",
    "adu_per_eV",
    "adu_per_photon",
    "max_adu",
    "badrow_direction",
    "no_index",
    "rail_direction",
    "clen_for_centering",
    "photon_energy_bandwidth",
    "bandwidth",
    "peak_info_location",
    "peak_list",
    "peak_list_type",
    "flag_lessthan",
    "flag_morethan",
    "flag_equal",
    "rigid_group",
];

/// Whether `key` is one of CrystFEL's geometry keys (those read, refused
/// and skipped alike).
fn crystfel_key(key: &str) -> bool {
    let numbered = |prefix: &str| {
        key.strip_prefix(prefix).is_some_and(|r| r.starts_with(|c: char| c.is_ascii_digit()))
    };
    READ.contains(&key)
        || SKIPPED.contains(&key)
        || REFUSED.contains(&key)
        || numbered("dim")
        || numbered("mask")
        || key.starts_with("rigid_group_")
        || key.starts_with("group_")
}

/// Keys refused: the reader would need what they imply.
const REFUSED: [&str; 4] =
    ["wavelength", "electron_voltage", "detector_shift_x", "detector_shift_y"];

/// Keys of the whole detector or beam, which a panel does not take.
const DETECTOR_ONLY: [&str; 8] = [
    "photon_energy",
    "photon_energy_scale",
    "photon_energy_bandwidth",
    "bandwidth",
    "peak_list",
    "peak_list_type",
    "peak_info_location",
    "mask_edge_pixels",
];

/// Keys and their (line number, value).
type Keys = BTreeMap<String, (usize, String)>;

/// Reads a CrystFEL geometry file.
pub fn read_geom(path: &Path) -> Result<Geometry, IoError> {
    let bytes = read_all(path)?;
    parse_geom(&String::from_utf8_lossy(&bytes))
        .map_err(|reason| IoError::Malformed { path: path.to_path_buf(), reason })
}

/// Parses the text of a geometry file; the error names the line or panel.
pub fn parse_geom(text: &str) -> Result<Geometry, String> {
    let mut global = Keys::new();
    let mut panels: Vec<(String, Keys)> = Vec::new();
    let mut warnings = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split(';').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let (key, value) =
            line.split_once('=').ok_or(format!("line {}: '{line}' is not 'key = value'", i + 1))?;
        let (key, value) = (key.trim(), value.trim().to_string());
        let of_panel = key.split_once('/').map(|(p, k)| (p.trim(), k.trim()));
        // (bad regions and panel groups have keys of their own)
        if of_panel.is_some_and(|(p, _)| p.starts_with("bad") || p.starts_with("rigid_group")) {
            continue;
        }
        let own = of_panel.map_or(key, |(_, k)| k);
        let skip = |why: &str| format!("line {}: '{own}' {why}; the line is skipped", i + 1);
        if !crystfel_key(own) {
            warnings.push(skip("is not a CrystFEL geometry key (misspelled?)"));
            continue;
        }
        if of_panel.is_some() && (DETECTOR_ONLY.contains(&own) || REFUSED.contains(&own)) {
            warnings.push(skip("is a key of the whole detector, not of a panel"));
            continue;
        }
        if own == "clen_for_centering" {
            warnings.push(skip("(CrystFEL 0.9's rail correction of the panels) is not read"));
            continue;
        }
        match key.split_once('/') {
            Some((panel, param)) => {
                let panel = panel.trim();
                let k = match panels.iter().position(|(n, _)| n == panel) {
                    Some(k) => k,
                    None => {
                        panels.push((panel.to_string(), BTreeMap::new()));
                        panels.len() - 1
                    }
                };
                panels[k].1.insert(param.trim().to_string(), (i + 1, value));
            }
            None => {
                global.insert(key.to_string(), (i + 1, value));
            }
        }
    }
    if panels.is_empty() {
        return Err("no panel (lines 'name/min_fs = ...' and so on)".into());
    }
    for key in REFUSED {
        if let Some((line, _)) = global.get(key) {
            return Err(format!(
                "line {line}: {key} is not read (give the wavelength with photon_energy or -lambda, and place the panels with corner_x/corner_y)"
            ));
        }
    }
    let (photon_energy_ev, photon_energy_path) = match global.get("photon_energy") {
        Some((line, v)) => match with_unit(v, &[("ev", 1.0), ("kev", 1000.0)]) {
            Some(ev) if ev > 0.0 => (Some(ev), None),
            Some(_) if number_in(v).is_some() => {
                return Err(format!(
                    "line {line}: photon_energy {v}: not a positive energy in eV or keV"
                ))
            }
            Some(_) => return Err(format!("line {line}: photon_energy {v} is not positive")),
            // a path into the data file: the wavelength comes from the flags
            None if v.trim_start().starts_with('/') => (None, Some(v.trim().to_string())),
            None => {
                return Err(format!(
                    "line {line}: photon_energy {v}: not an energy (a number, then eV or keV, or a path into the data file)"
                ))
            }
        },
        None => (None, None),
    };
    // (CrystFEL multiplies the energy by it, read or given)
    let photon_energy_ev = match global.get("photon_energy_scale") {
        Some((line, v)) => match number_in(v).filter(|x| *x > 0.0) {
            Some(scale) => photon_energy_ev.map(|ev| ev * scale),
            None => {
                return Err(format!(
                    "line {line}: photon_energy_scale {v} is not a positive number"
                ))
            }
        },
        None => photon_energy_ev,
    };
    let panels = panels
        .iter()
        .map(|(name, own)| panel(name, own, &global))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Geometry { panels, photon_energy_ev, photon_energy_path, warnings })
}

/// The number at the start of `v` (`9500 eV`, `0.12`).
fn number_in(v: &str) -> Option<f64> {
    v.split_whitespace().next()?.parse::<f64>().ok().filter(|x| x.is_finite())
}

/// A number and an optional unit after it, scaled by the unit's factor
/// (the first of `units` when none is given; `None` for another unit).
fn with_unit(v: &str, units: &[(&str, f64)]) -> Option<f64> {
    let x = number_in(v)?;
    match v.split_whitespace().nth(1) {
        None => Some(x * units[0].1),
        Some(u) => units.iter().find(|(name, _)| name.eq_ignore_ascii_case(u)).map(|(_, f)| x * f),
    }
}

/// One panel from its own keys and the defaults.
/// One more than the largest `min_fs`/`max_fs`/`min_ss`/`max_ss` taken: 2²⁰
/// pixels along an axis, far past any detector, so that a data array's size
/// always fits the memory check's arithmetic.
const MAX_PIXEL_INDEX: f64 = (1u64 << 20) as f64;

fn panel(name: &str, own: &Keys, global: &Keys) -> Result<Panel, String> {
    let get = |key: &str| own.get(key).or_else(|| global.get(key));
    let num = |key: &str| -> Result<f64, String> {
        let (line, v) = get(key).ok_or(format!("panel {name}: no {key}"))?;
        number_in(v).ok_or(format!("line {line}: panel {name}: {key} = {v} is not a number"))
    };
    let res = num("res")?;
    if res <= 0.0 {
        return Err(format!("panel {name}: res {res} (pixels per metre) is not positive"));
    }
    let extent = |lo: &str, hi: &str| -> Result<usize, String> {
        let (a, b) = (num(lo)?, num(hi)?);
        for (key, v) in [(lo, a), (hi, b)] {
            if !(v >= 0.0 && v.fract() == 0.0) {
                return Err(format!(
                    "panel {name}: {key} {v} is not a pixel index (a whole number >= 0)"
                ));
            }
            if v >= MAX_PIXEL_INDEX {
                return Err(format!(
                    "panel {name}: {key} {v} is past the largest pixel index this program takes ({})",
                    MAX_PIXEL_INDEX - 1.0
                ));
            }
        }
        if b < a {
            return Err(format!(
                "panel {name}: {hi} {b} is below {lo} {a}: a panel of {} pixels",
                b - a + 1.0
            ));
        }
        Ok((b - a + 1.0) as usize)
    };
    let (fpixels, spixels) = (extent("min_fs", "max_fs")?, extent("min_ss", "max_ss")?);
    let data_origin = [num("min_fs")? as usize, num("min_ss")? as usize];
    let metres = |key: &str| -> Result<f64, String> {
        let (line, v) = get(key).ok_or(format!("panel {name}: no {key}"))?;
        with_unit(v, &[("m", 1.0), ("mm", 1e-3)]).ok_or(format!(
            "line {line}: panel {name}: {key} = {v} is not a length in m or mm (a value read from the data file cannot be simulated: give a number)"
        ))
    };
    let clen = metres("clen")?;
    let coffset = if get("coffset").is_some() { metres("coffset")? } else { 0.0 };
    let axis = |key: &str| -> Result<[f64; 3], String> {
        let (line, v) = get(key).ok_or(format!("panel {name}: no {key}"))?;
        let x = parse_axis(v).ok_or(format!(
            "line {line}: panel {name}: {key} = {v} is not like '+1.0x -0.02y +0.0z'"
        ))?;
        // refined geometries have axes a little off unit length: their
        // direction is used, the pixel size is res's
        let m = (x[0] * x[0] + x[1] * x[1] + x[2] * x[2]).sqrt();
        if (m - 1.0).abs() > 1e-2 {
            return Err(format!("line {line}: panel {name}: {key} has length {m}, not 1 (pixels of one size along fs and ss are simulated)"));
        }
        Ok(x.map(|c| c / m))
    };
    let (fs, ss) = (axis("fs")?, axis("ss")?);
    let pixel_mm = 1000.0 / res;
    let corner = [num("corner_x")?, num("corner_y")?];
    // CrystFEL (x, y, z) to DIALS (-x, y, -z)
    let to_dials = |x: [f64; 3]| [-x[0], x[1], -x[2]];
    let z_mm = (clen + coffset) * 1000.0;
    Ok(Panel {
        name: name.to_string(),
        origin_mm: to_dials([corner[0] * pixel_mm, corner[1] * pixel_mm, z_mm]),
        fast: to_dials(fs),
        slow: to_dials(ss),
        pixel_mm: [pixel_mm; 2],
        image_size: [fpixels, spixels],
        thickness_mm: 0.0,
        mu_per_mm: 0.0,
        data_origin: Some(data_origin),
    })
}

/// `+1.0x -0.02y +0.0z` (terms in any order, each optional).
fn parse_axis(v: &str) -> Option<[f64; 3]> {
    let mut out = [0.0; 3];
    let compact: String = v.chars().filter(|c| !c.is_whitespace()).collect();
    let mut rest = compact.as_str();
    while !rest.is_empty() {
        let end = rest.find(['x', 'y', 'z'])?;
        let coef = match &rest[..end] {
            "" | "+" => 1.0,
            "-" => -1.0,
            c => c.parse::<f64>().ok()?,
        };
        let k = match rest.as_bytes()[end] {
            b'x' => 0,
            b'y' => 1,
            _ => 2,
        };
        out[k] += coef;
        rest = &rest[end + 1..];
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GEOM: &str = "; two modules
clen = 0.1
res = 10000
photon_energy = 9537.0 eV
data = /entry/data/data
m0/min_fs = 0
m0/max_fs = 127
m0/min_ss = 0
m0/max_ss = 63
m0/corner_x = -64
m0/corner_y = 70
m0/fs = +1.0x +0.0y
m0/ss = 0x -1y
m1/min_fs = 128
m1/max_fs = 255
m1/min_ss = 0
m1/max_ss = 63
m1/corner_x = 10
m1/corner_y = 70
m1/fs = -0.0y +1x
m1/ss = -1.0y
m1/coffset = 0.002
bad_beamstop/min_x = -5
";

    #[test]
    fn panels_in_the_dials_frame() {
        let g = parse_geom(GEOM).unwrap();
        assert_eq!(g.photon_energy_ev, Some(9537.0));
        assert_eq!(g.panels.len(), 2);
        let p = &g.panels[1];
        assert_eq!(p.image_size, [128, 64]);
        assert_eq!(p.data_origin, Some([128, 0]));
        assert_eq!(p.pixel_mm, [0.1, 0.1]);
        assert_eq!(p.fast, [-1.0, 0.0, -0.0]);
        assert_eq!(p.slow, [-0.0, -1.0, -0.0]);
        let want = [-1.0, 7.0, -102.0];
        assert!(
            p.origin_mm.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-12),
            "{:?}",
            p.origin_mm
        );
    }

    #[test]
    fn errors_name_the_panel_and_line() {
        let mm = parse_geom(&GEOM.replace("clen = 0.1", "clen = 100 mm")).unwrap();
        assert_eq!(mm.panels[0].origin_mm[2], -100.0);
        let kev = parse_geom(&GEOM.replace("9537.0 eV", "9.537 keV")).unwrap();
        assert_eq!(kev.photon_energy_ev, Some(9537.0));
        let path = parse_geom(&GEOM.replace("9537.0 eV", "/LCLS/photon_energy_eV")).unwrap();
        assert_eq!(path.photon_energy_ev, None);
        assert_eq!(path.photon_energy_path.as_deref(), Some("/LCLS/photon_energy_eV"));
        for bad in ["9537eV", "9537 J"] {
            let e = parse_geom(&GEOM.replace("9537.0 eV", bad)).unwrap_err();
            assert!(e.contains("not an energy"), "{bad}: {e}");
        }
        let e = parse_geom(&GEOM.replace("m1/fs = -0.0y +1x", "m1/fs = 1.5x")).unwrap_err();
        assert!(e.contains("panel m1: fs has length 1.5"), "{e}");
        let e = parse_geom(&GEOM.replace("clen = 0.1", "clen = /LCLS/detector_1/EncoderValue"))
            .unwrap_err();
        assert!(e.contains("clen") && e.contains("data file"), "{e}");
        let e = parse_geom(&GEOM.replace("m0/max_ss = 63", "m0/max_ss = 62.5")).unwrap_err();
        assert!(e.contains("whole number"), "{e}");
        // huge indices are refused before any size is computed from them
        for big in ["1e300", "1e19", "1e9", "1048576"] {
            let e = parse_geom(&GEOM.replace("m1/min_ss = 0", &format!("m1/min_ss = {big}")))
                .unwrap_err();
            assert!(e.contains("panel m1: min_ss") && e.contains("largest pixel index"), "{e}");
        }
        let e = parse_geom(&GEOM.replace("m0/max_ss = 63", "m0/max_ss = -1")).unwrap_err();
        assert!(e.contains("max_ss -1 is not a pixel index"), "{e}");
        let e = parse_geom(&GEOM.replace("m1/min_fs = 128", "m1/min_fs = 300")).unwrap_err();
        assert!(e.contains("max_fs 255 is below min_fs 300: a panel of -44 pixels"), "{e}");
        assert!(parse_geom("clen = 0.1\n").unwrap_err().contains("no panel"));
    }

    #[test]
    fn keys_crystfel_does_not_know_are_reported() {
        assert!(parse_geom(GEOM).unwrap().warnings.is_empty());
        // CrystFEL's keys that describe the data, masks, response and groups
        let known = "dim0 = %\ndim1 = ss\ndim2 = fs\nmask = /m\nmask_good = 0x0\nmask_bad = 0xff\n\
                     mask0_data = /m0\nmask0_goodbits = 1\nadu_per_eV = 0.001\nmax_adu = 60000\n\
                     flag_morethan = 65000\nrigid_group_q0 = m0,m1\nrigid_group_collection_all = q0\n\
                     group_all = m0,m1\nm0/adu_per_photon = 1\nm1/no_index = 0\nm1/rigid_group = q0\n\
                     badrow_direction = -\nphoton_energy_scale = 1\n";
        let g = parse_geom(&format!("{GEOM}{known}")).unwrap();
        assert!(g.warnings.is_empty(), "{:?}", g.warnings);
        // a misspelling, global or a panel's, is skipped and named
        let typo = GEOM.replace("m1/corner_x = 10", "m1/corner_x = 10\nm1/coner_y = 5");
        let g = parse_geom(&format!("{typo}cofset = 0.001\n")).unwrap();
        assert_eq!(g.warnings.len(), 2, "{:?}", g.warnings);
        assert!(g.warnings[0].contains("line 19: 'coner_y'"), "{:?}", g.warnings);
        assert!(g.warnings[1].contains("'cofset'") && g.warnings[1].contains("misspelled"));
        assert_eq!(g.panels, parse_geom(GEOM).unwrap().panels);
        // a key of the whole detector on a panel; a global key like a bad region's name
        let g =
            parse_geom(&format!("{GEOM}m0/photon_energy = 12 keV\nbadrow_directon = -\n")).unwrap();
        assert_eq!(g.photon_energy_ev, Some(9537.0));
        assert!(g.warnings[0].contains("'photon_energy' is a key of the whole detector"));
        assert!(g.warnings[1].contains("'badrow_directon' is not a CrystFEL geometry key"));
        let g = parse_geom(&format!("{GEOM}clen_for_centering = 0.1\n")).unwrap();
        assert!(g.warnings[0].contains("rail correction"), "{:?}", g.warnings);
        // the energy's scale is applied
        let g = parse_geom(&format!("{GEOM}photon_energy_scale = 0.5\n")).unwrap();
        assert_eq!((g.photon_energy_ev, g.warnings.len()), (Some(4768.5), 0));
        assert!(parse_geom(&format!("{GEOM}photon_energy_scale = -1\n")).is_err());
    }
}
