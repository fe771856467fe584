//! `-gradient`: derivative images of every pixel by chosen parameters,
//! written next to the usual outputs; `-curvatures`: second derivatives
//! (see docs/derivatives.md).

use crate::invocation::{Curvatures, Invocation};
use anyhow::{anyhow, Result};
use nanobragg_core::diff::leaves::{applicable, check_param};
use nanobragg_core::diff::{hessian_of, jacobian_of, Param};
use nanobragg_core::render::RenderOptions;
use nanobragg_core::setup::{Plan, SetupSeeds};
use std::io::Write;
use std::path::PathBuf;

/// The parameters of `-gradient`, each checked against the plan; `None`
/// without the flag. Errors name the flag and the parameter.
pub fn params(inv: &Invocation, plan: &Plan) -> Result<Option<Vec<Param>>> {
    Ok(selected(inv, plan)?.map(|(params, _)| params))
}

/// True for the parameter list `all`.
pub fn is_all(list: &str) -> bool {
    list.trim().eq_ignore_ascii_case("all")
}

/// The line saying which parameters `all` left out and why, if any
/// (`-gradient all: skipped mosaic: needs ...; osc: ...`).
pub fn skipped_line(flag: &str, skipped: &[String]) -> Option<String> {
    if skipped.is_empty() {
        return None;
    }
    Some(format!("{flag} all: skipped {}", skipped.join("; ")))
}

/// [`params`], with the line saying what `all` left out (see [`skipped_line`]).
pub fn selected(inv: &Invocation, plan: &Plan) -> Result<Option<(Vec<Param>, Option<String>)>> {
    let Some(list) = &inv.gradient else {
        if inv.curvatures != Curvatures::None {
            return Err(anyhow!("invalid -curvatures: needs -gradient (the parameters)"));
        }
        return Ok(None);
    };
    if inv.batch_path.is_some() {
        return Err(anyhow!("invalid -gradient: not with -batch"));
    }
    let params = Param::parse_list(list)?;
    if is_all(list) {
        // every parameter that applies to this model
        let (params, skipped) = applicable(&inv.config, plan, &params);
        if params.is_empty() {
            return Err(anyhow!("invalid -gradient: no parameter applies to this model"));
        }
        return Ok(Some((params, skipped_line("-gradient", &skipped))));
    }
    for &p in &params {
        check_param(&inv.config, plan, p)?;
    }
    Ok(Some((params, None)))
}

/// The file of the derivative image by `p`: `PREFIX_NAME.bin`.
pub fn file_name(prefix: &str, p: Param) -> PathBuf {
    PathBuf::from(format!("{prefix}_{}.bin", p.name()))
}

/// The file of the second derivative by `a` and `b`: `PREFIX_A_B.bin`.
pub fn file_name2(prefix: &str, a: Param, b: Param) -> PathBuf {
    PathBuf::from(format!("{prefix}_{}_{}.bin", a.name(), b.name()))
}

/// What a derivative image holds, for the report.
fn per(a: Param, b: Option<Param>) -> String {
    match b {
        None => format!("d pixel / d {a}, photons {}", a.per_unit()),
        Some(b) if a == b => format!("d² pixel / d {a}², photons {} squared", a.per_unit()),
        Some(b) => format!("d² pixel / d {a} d {b}, photons {} {}", a.per_unit(), b.per_unit()),
    }
}

/// Compute and write the derivative images of `-gradient` and
/// `-curvatures` (nothing without the flag), reporting each file on `out`.
pub fn write(inv: &Invocation, plan: &Plan, seeds: SetupSeeds, out: &mut impl Write) -> Result<()> {
    let Some(params) = params(inv, plan)? else { return Ok(()) };
    let opts = RenderOptions { threads: inv.threads };
    let mut files: Vec<(PathBuf, String, Vec<f32>)> = Vec::new();
    if inv.curvatures == Curvatures::None {
        let j = jacobian_of(&inv.config, plan, &params, seeds, opts, inv.precision)?;
        for (p, d) in params.iter().zip(j.derivatives) {
            files.push((file_name(&inv.gradfile, *p), per(*p, None), d));
        }
    } else {
        // the hyper-dual renders carry the first derivatives too
        let mixed = inv.curvatures == Curvatures::Mixed;
        let h = hessian_of(&inv.config, plan, &params, seeds, opts, mixed)?;
        for ((p, g), d2) in params.iter().zip(h.gradient).zip(h.diagonal) {
            files.push((file_name(&inv.gradfile, *p), per(*p, None), g));
            files.push((file_name2(&inv.gradfile, *p, *p), per(*p, Some(*p)), d2));
        }
        for (i, j, d2) in h.mixed {
            let (a, b) = (params[i], params[j]);
            files.push((file_name2(&inv.gradfile, a, b), per(a, Some(b)), d2));
        }
    }
    for (path, what, d) in &files {
        writeln!(out, "writing {} as {} 4-byte floats ({what})", path.display(), d.len())?;
        nanobragg_io::float::write_float_image(path, d)
            .map_err(|e| anyhow!("-gradfile {}: {e}", path.display()))?;
    }
    out.flush()?;
    Ok(())
}
