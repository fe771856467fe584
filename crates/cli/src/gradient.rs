//! `-gradient`: derivative images of every pixel by chosen parameters,
//! written next to the usual outputs (see docs/derivatives.md).

use crate::parse::Invocation;
use anyhow::{anyhow, Result};
use nanobragg_core::diff::leaves::check_param;
use nanobragg_core::diff::{jacobian_with, Param};
use nanobragg_core::render::RenderOptions;
use nanobragg_core::setup::{Plan, SetupSeeds};
use std::io::Write;
use std::path::PathBuf;

/// The parameters of `-gradient`, each checked against the plan; `None`
/// without the flag. Errors name the flag and the parameter.
pub fn params(inv: &Invocation, plan: &Plan) -> Result<Option<Vec<Param>>> {
    let Some(list) = &inv.gradient else { return Ok(None) };
    if inv.batch_path.is_some() {
        return Err(anyhow!("invalid -gradient: not with -batch"));
    }
    let params = Param::parse_list(list)?;
    for &p in &params {
        check_param(&inv.config, plan, p)?;
    }
    Ok(Some(params))
}

/// The file of the derivative image by `p`: `PREFIX_NAME.bin`.
pub fn file_name(prefix: &str, p: Param) -> PathBuf {
    PathBuf::from(format!("{prefix}_{}.bin", p.name()))
}

/// Compute and write the derivative images of `-gradient` (nothing without
/// the flag), reporting each file on `out`.
pub fn write(inv: &Invocation, plan: &Plan, seeds: SetupSeeds, out: &mut impl Write) -> Result<()> {
    let Some(params) = params(inv, plan)? else { return Ok(()) };
    let opts = RenderOptions { threads: inv.threads };
    let j = jacobian_with(&inv.config, &params, seeds, opts)?;
    for (p, d) in params.iter().zip(&j.derivatives) {
        let path = file_name(&inv.gradfile, *p);
        writeln!(
            out,
            "writing {} as {} 4-byte floats (d pixel / d {p}, photons {})",
            path.display(),
            d.len(),
            p.per_unit()
        )?;
        nanobragg_io::float::write_float_image(&path, d)
            .map_err(|e| anyhow!("-gradfile {}: {e}", path.display()))?;
    }
    out.flush()?;
    Ok(())
}
