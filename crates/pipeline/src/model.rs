//! Structure factors from an atomic model (`-model`) and from an
//! asymmetric unit (`-hkl` with `-spacegroup`), for every command that
//! takes the render's flags, and for `nanobragg sf`.

use std::path::Path;

use nanobragg_core::crystal::space_group::SpaceGroup;
use nanobragg_core::error::{Error, Result};
use nanobragg_core::model::structure_factors::{Anomalous, ModelStructureFactors, Reflection};
use nanobragg_core::model::{read_model, Element, Model};
use nanobragg_core::sf::HklEntry;
use nanobragg_core::Experiment;

/// `-anomalous EL FP FDP` as typed: the element's symbol, f′ and f″.
pub type AnomalousArgs = [String; 3];

/// The f′ and f″ of `-anomalous` (each `EL FP FDP`), checked.
pub fn anomalous(args: &[AnomalousArgs]) -> Result<Vec<Anomalous>> {
    args.iter()
        .map(|[el, fp, fdp]| {
            let invalid = |msg: String| Error::Invalid { what: "-anomalous", msg };
            let element = Element::from_symbol(el)
                .ok_or_else(|| invalid(format!("'{el}' is not an element symbol")))?;
            let number = |s: &str, what: &str| {
                s.parse::<f64>()
                    .ok()
                    .filter(|x| x.is_finite())
                    .ok_or_else(|| invalid(format!("{what} '{s}' of {el} is not a finite number")))
            };
            Ok(Anomalous { element, fp: number(fp, "f′")?, fdp: number(fdp, "f″")? })
        })
        .collect()
}

/// The space group `symbol` names (H-M, number or `Hall: …`), as an error
/// naming `what` gave it.
pub fn space_group(symbol: &str, what: &'static str) -> Result<SpaceGroup> {
    SpaceGroup::from_symbol(symbol).map_err(|e| Error::Invalid { what, msg: e.to_string() })
}

/// The model of `path` in its own space group (its Hall symbol where it
/// gives one, else its H-M symbol) or in `space_group` where given.
pub fn read(path: &Path, space_group: Option<&str>) -> Result<(Model, SpaceGroup)> {
    let model = read_model(path)?;
    let group = match (space_group, &model.hall) {
        (Some(s), _) => self::space_group(s, "-spacegroup")?,
        (None, Some(hall)) => SpaceGroup::from_hall(hall).map_err(|e| Error::Malformed {
            path: path.to_path_buf(),
            msg: format!("Hall symbol '{hall}': {e}"),
        })?,
        (None, None) => {
            SpaceGroup::from_symbol(&model.space_group).map_err(|e| Error::Malformed {
                path: path.to_path_buf(),
                msg: format!("space group '{}': {e}", model.space_group),
            })?
        }
    };
    Ok((model, group))
}

/// The model's structure factors on every reflection to `dmin_a` (h = 0
/// left out), in h, k, l order, as (h, F) with F as (re, im).
pub fn structure_factors(sf: &ModelStructureFactors, dmin_a: f64) -> Result<Vec<Reflection>> {
    let mut all = sf.to_resolution(dmin_a)?;
    all.sort_unstable_by_key(|(h, _)| *h);
    Ok(all)
}

/// The amplitudes of [`structure_factors`] as `-hkl` entries.
pub fn entries(all: &[Reflection]) -> Vec<HklEntry> {
    all.iter()
        .map(|([h, k, l], (re, im))| HklEntry {
            h: f64::from(*h),
            k: f64::from(*k),
            l: f64::from(*l),
            f: re.hypot(*im),
        })
        .collect()
}

/// The resolution (Å) to which a render of `exp` looks structure factors
/// up: the highest-angle pixel's d at the shortest wavelength (or `dmin_a`,
/// the render's `-dmin`, where higher), less the reach of the lookup (the
/// nearest whole index, or the tricubic's two neighbours with
/// `interpolate`), so that no looked-up reflection falls outside.
pub fn render_resolution_a(
    exp: &Experiment,
    interpolate: bool,
    dmin_a: Option<f64>,
) -> Option<f64> {
    let mut inv_d_max: f64 = 0.0;
    let mut reach: f64 = 0.0;
    for plan in &exp.plans {
        let det = &plan.detector;
        let lambda_a =
            plan.sources.list.iter().map(|s| s.lambda_m).fold(f64::INFINITY, f64::min) * 1e10;
        if !(lambda_a.is_finite() && lambda_a > 0.0) {
            return None;
        }
        let beam = det.beam;
        let norm = |v: [f64; 3]| (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]).sqrt();
        let (wf, ws) =
            (det.fpixels as f64 * det.pixel_size_m, det.spixels as f64 * det.pixel_size_m);
        // the rim of the panel, sampled: the steepest pixel of a flat panel
        // lies on it (a corner, unless the panel is tilted across the beam)
        let steps = 64;
        for i in 0..=steps {
            let t = i as f64 / steps as f64;
            for (f, s) in [(t * wf, 0.0), (t * wf, ws), (0.0, t * ws), (wf, t * ws)] {
                let p = [0, 1, 2].map(|a| det.pix0[a] + f * det.fdet[a] + s * det.sdet[a]);
                let cos2t = (p[0] * beam[0] + p[1] * beam[1] + p[2] * beam[2]) / norm(p);
                let sin_t = (0.5 * (1.0 - cos2t.clamp(-1.0, 1.0))).sqrt();
                inv_d_max = inv_d_max.max(2.0 * sin_t / lambda_a);
            }
        }
        let star = [plan.cell.a_star, plan.cell.b_star, plan.cell.c_star];
        let sum: f64 = star.iter().map(|v| norm(*v)).sum();
        reach = reach.max(if interpolate { 2.5 } else { 0.5 } * sum);
    }
    if let Some(d) = dmin_a {
        inv_d_max = inv_d_max.min(1.0 / d);
    }
    let inv_d = inv_d_max + reach;
    (inv_d > 0.0).then(|| 1.0 / inv_d)
}

/// `-hkl` entries of an asymmetric unit, expanded by `group`'s operators
/// and Friedel's law (amplitudes only: with anomalous differences, give
/// both mates). An entry given in the file is kept as given; an index
/// reached from two entries takes the first.
///
/// Errors: an index that is not a whole number.
pub fn expand(entries: &[HklEntry], group: &SpaceGroup) -> Result<Vec<HklEntry>> {
    use std::collections::HashMap;
    let mut given: HashMap<[i32; 3], f64> = HashMap::with_capacity(entries.len());
    let mut order: Vec<[i32; 3]> = Vec::with_capacity(entries.len());
    for (n, e) in entries.iter().enumerate() {
        let whole = |x: f64| (x.fract() == 0.0 && x.abs() < 1e9).then_some(x as i32);
        let (Some(h), Some(k), Some(l)) = (whole(e.h), whole(e.k), whole(e.l)) else {
            return Err(Error::Invalid {
                what: "-spacegroup",
                msg: format!(
                    "entry {} ({} {} {}) has an index that is not a whole number: the -hkl file must list whole reflections to be expanded by symmetry",
                    n + 1,
                    e.h,
                    e.k,
                    e.l
                ),
            });
        };
        if given.insert([h, k, l], e.f).is_none() {
            order.push([h, k, l]);
        }
    }
    let mut all = given.clone();
    let mut out: Vec<HklEntry> = Vec::with_capacity(entries.len() * group.ops().len() * 2);
    let push = |hkl: [i32; 3], f: f64, out: &mut Vec<HklEntry>| {
        out.push(HklEntry { h: hkl[0].into(), k: hkl[1].into(), l: hkl[2].into(), f });
    };
    for h in &order {
        push(*h, given[h], &mut out);
    }
    for h in &order {
        let f = given[h];
        for op in group.ops() {
            let e = op.hkl(*h);
            for mate in [e, e.map(|x| -x)] {
                if let std::collections::hash_map::Entry::Vacant(v) = all.entry(mate) {
                    v.insert(f);
                    push(mate, f, &mut out);
                }
            }
        }
    }
    Ok(out)
}
