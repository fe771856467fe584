//! `nanobragg sf`: the structure factors of an atomic model, written as an
//! `-hkl` file.
//!
//! `nanobragg sf -model FILE -dmin Å -hkl OUT.hkl [-spacegroup SYMBOL]
//! [-anomalous EL FP FDP]... [-phases]`
//!
//! Every reflection of the full sphere to `-dmin` (h = 0 left out), one
//! `h k l |F|` line each in h, k, l order, with the phase (degrees) as a
//! fifth column under `-phases` (nanobragg's `-hkl` reader skips it;
//! nanoBragg.c's would not).

use std::io::Write;
use std::path::PathBuf;

use crate::output_files::{open_output, write_error};
use anyhow::{bail, Context, Result};

const USAGE: &str = "usage: nanobragg sf -model FILE -dmin Å -hkl OUT.hkl [-spacegroup SYMBOL] [-anomalous EL FP FDP]... [-phases]";

/// Computes and writes the structure factors the command line `args` asks
/// for, reporting the model, the space group and the count to `out`.
pub fn run(args: &[String], out: &mut impl Write) -> Result<()> {
    let mut model: Option<PathBuf> = None;
    let mut output: Option<PathBuf> = None;
    let mut dmin: Option<f64> = None;
    let mut space_group: Option<String> = None;
    let mut anomalous: Vec<crate::model::AnomalousArgs> = Vec::new();
    let mut phases = false;
    let mut it = args.iter();
    let value = |flag: &str, it: &mut std::slice::Iter<'_, String>| {
        it.next().cloned().with_context(|| format!("{flag} needs a value\n{USAGE}"))
    };
    while let Some(a) = it.next() {
        match a.as_str() {
            "-model" => model = Some(PathBuf::from(value(a, &mut it)?)),
            "-hkl" | "-o" => output = Some(PathBuf::from(value(a, &mut it)?)),
            "-dmin" => {
                let v = value(a, &mut it)?;
                match v.parse::<f64>() {
                    Ok(d) if d > 0.0 && d.is_finite() => dmin = Some(d),
                    _ => bail!(
                        "-dmin: '{}' is not a resolution in Å (a number > 0)",
                        v.escape_debug()
                    ),
                }
            }
            "-spacegroup" => space_group = Some(value(a, &mut it)?),
            "-anomalous" => {
                anomalous.push([value(a, &mut it)?, value(a, &mut it)?, value(a, &mut it)?])
            }
            "-phases" => phases = true,
            "-h" | "--help" => {
                writeln!(out, "{USAGE}")?;
                return Ok(());
            }
            s => bail!("unknown argument {}\n{USAGE}", s.escape_debug()),
        }
    }
    let model = model.with_context(|| format!("no model (-model FILE)\n{USAGE}"))?;
    let output = output.with_context(|| format!("no output file (-hkl OUT.hkl)\n{USAGE}"))?;
    let dmin = dmin.with_context(|| format!("no resolution limit (-dmin Å)\n{USAGE}"))?;
    let anomalous = crate::model::anomalous(&anomalous)?;
    // the output opened first: a name that cannot be written is refused
    // before the summation
    let mut file = open_output("-hkl", &output)?;
    let (atoms, group) = crate::model::read(&model, space_group.as_deref())?;
    let sf = nanobragg_core::model::structure_factors::ModelStructureFactors::new(
        &atoms, &group, &anomalous,
    )
    .with_context(|| format!("-model {}", model.display()))?;
    let all = crate::model::structure_factors(&sf, dmin)?;
    if let Some((h, _)) = all.iter().find(|(_, (re, im))| !(re.is_finite() && im.is_finite())) {
        bail!(
            "F({} {} {}) is not a finite number: check the model's B and occupancies",
            h[0],
            h[1],
            h[2]
        );
    }
    let written = file.write(|w| {
        for ([h, k, l], (re, im)) in &all {
            let f = re.hypot(*im);
            match phases {
                true => writeln!(w, "{h} {k} {l} {f} {}", im.atan2(*re).to_degrees())?,
                false => writeln!(w, "{h} {k} {l} {f}")?,
            }
        }
        Ok(())
    });
    written.map_err(|e| write_error("-hkl", e))?;
    crate::output_files::commit(vec![("-hkl", file)])?;
    writeln!(
        out,
        "{}: {} atoms in {} (number {}, Hall {})",
        model.display(),
        atoms.atoms.len(),
        group.hm(),
        group.number(),
        group.hall()
    )?;
    writeln!(out, "wrote {} reflections to {} Å in {}", all.len(), dmin, output.display())?;
    Ok(())
}
