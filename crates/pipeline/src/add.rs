//! `nanobragg add`: sums raw float images (the suite's `float_add`), e.g. a
//! crystal's Bragg image and `nonbragg`'s background before `noisify`.
//!
//! `nanobragg add IN1.bin IN2.bin [...] -floatfile OUT.bin [-scale S1,S2,...]`
//!
//! Every input must hold the same number of 4-byte floats; each is
//! multiplied by its scale (default 1) and the sum, taken in double
//! precision, is written as 4-byte floats. The files are read in blocks, so
//! images of any size add in constant memory.

use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::path::PathBuf;

use crate::output_files::{open_output, write_error};
use anyhow::{bail, Context, Result};

const USAGE: &str =
    "usage: nanobragg add IN1.bin IN2.bin [...] -floatfile OUT.bin [-scale S1,S2,...]";

/// Values summed per block.
const BLOCK: usize = 1 << 16;

/// Sums the float images named in `args`, printing one line per input and
/// one for the output to `out`.
pub fn run(args: &[String], out: &mut impl Write) -> Result<()> {
    let mut inputs: Vec<PathBuf> = Vec::new();
    let mut output: Option<PathBuf> = None;
    let mut scales: Option<Vec<f64>> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-floatfile" | "-o" => {
                let v = it.next().with_context(|| format!("{a} needs a file name\n{USAGE}"))?;
                if v.is_empty() {
                    bail!("{a}: the file name is empty");
                }
                output = Some(PathBuf::from(v));
            }
            "-scale" => {
                let v = it.next().with_context(|| format!("-scale needs values\n{USAGE}"))?;
                let parsed: Result<Vec<f64>, _> =
                    v.split(',').map(|s| s.trim().parse::<f64>()).collect();
                match parsed {
                    Ok(s) if s.iter().all(|x| x.is_finite()) => scales = Some(s),
                    _ => bail!(
                        "-scale: '{}' is not a comma-separated list of finite numbers",
                        v.escape_debug()
                    ),
                }
            }
            "-h" | "--help" => {
                writeln!(out, "{USAGE}")?;
                return Ok(());
            }
            s if s.starts_with('-') && s.len() > 1 => {
                bail!("unknown flag {}\n{USAGE}", s.escape_debug())
            }
            _ => inputs.push(PathBuf::from(a)),
        }
    }
    let output = output.with_context(|| format!("no output file (-floatfile OUT.bin)\n{USAGE}"))?;
    if inputs.is_empty() {
        bail!("no input images\n{USAGE}");
    }
    let scales = scales.unwrap_or_else(|| vec![1.0; inputs.len()]);
    if scales.len() != inputs.len() {
        bail!("-scale has {} values for {} input images", scales.len(), inputs.len());
    }
    // the output opened first: a name that cannot be written is refused
    // before anything is read
    let mut file = open_output("-floatfile", &output)?;
    let mut values = None;
    let mut readers = Vec::new();
    for p in &inputs {
        let meta = std::fs::metadata(p).with_context(|| format!("cannot read {}", p.display()))?;
        if !meta.is_file() {
            bail!("{} is not a regular file", p.display());
        }
        let len = meta.len();
        if len % 4 != 0 {
            bail!("{}: {len} bytes is not a whole number of 4-byte floats", p.display());
        }
        match values {
            None => values = Some((len / 4, p.clone())),
            Some((n, ref first)) if n != len / 4 => bail!(
                "{} holds {} floats but {} holds {n}: the images differ in size",
                p.display(),
                len / 4,
                first.display()
            ),
            Some(_) => {}
        }
        let f = File::open(p).with_context(|| format!("cannot read {}", p.display()))?;
        readers.push(BufReader::with_capacity(4 * BLOCK, f));
    }
    let (n, _) = values.expect("at least one input");
    for (p, s) in inputs.iter().zip(&scales) {
        writeln!(out, "adding {} x {} floats from {}", nanobragg_io::cfmt::g(*s), n, p.display())?;
    }
    let mut sums = vec![0f64; BLOCK];
    let mut bytes = vec![0u8; 4 * BLOCK];
    let written = file.write(|w| {
        let mut left = n as usize;
        while left > 0 {
            let m = left.min(BLOCK);
            sums[..m].fill(0.0);
            for (r, &s) in readers.iter_mut().zip(&scales) {
                r.read_exact(&mut bytes[..4 * m])?;
                for (sum, b) in sums[..m].iter_mut().zip(bytes.chunks_exact(4)) {
                    *sum += s * f32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f64;
                }
            }
            for (i, (b, &sum)) in bytes.chunks_exact_mut(4).zip(&sums[..m]).enumerate() {
                let x = sum as f32;
                if !x.is_finite() {
                    // (the file is not written: the atomic write leaves no part of it)
                    let at = n as usize - left + i;
                    return Err(std::io::Error::other(format!(
                        "pixel {at}: the sum {sum:e} is not a finite 4-byte float (inputs or -scale too large)"
                    )));
                }
                b.copy_from_slice(&x.to_le_bytes());
            }
            w.write_all(&bytes[..4 * m])?;
            left -= m;
        }
        Ok(())
    });
    written.map_err(|e| write_error("-floatfile", e))?;
    crate::output_files::commit(vec![("-floatfile", file)])?;
    writeln!(out, "wrote {} as {n} 4-byte floats", output.display())?;
    Ok(())
}
