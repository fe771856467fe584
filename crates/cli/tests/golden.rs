//! Parity of the `nanobragg` binary with the reference C nanoBragg on the golden set in
//! `tests/golden/` (see its README.md).
//!
//! Each case of `cases.toml` is run once with its exact argument string, in a scratch directory
//! holding a link to `tests/golden/inputs`; the runs are shared by all tests below (see
//! `common::runs`). Every test compares one kind of output over all cases that produce it,
//! prints one line per case plus a summary, and fails listing every failing case.
//!
//! Run: `cargo test --workspace --release`, or only this suite with
//! `cargo test --release -p nanobragg-cli --test golden`. `GOLDEN_CASES=bench,tric` limits the
//! cases; see `common/mod.rs` for the other knobs. The reports go to stderr (not captured).

mod common;

use common::{
    agreement, cases, close, compare_tokens, f32_image, parse_pgm, parse_smv, report, runs,
    stat_lines, Case, Run,
};

/// Float image: minimum Pearson correlation with the C image.
const MIN_CORR: f64 = 0.99999;
/// Float image: maximum |ours - C| relative to max |C|.
const MAX_REL_DIFF: f64 = 1e-4;
/// Noise image: minimum fraction of identical pixels.
const MIN_NOISE_IDENTICAL: f64 = 0.99;

/// The verdict on one case for one kind of output.
struct Outcome {
    pass: bool,
    /// Output identical to the reference (bit-identical image, identical text, ...).
    identical: bool,
    /// How far off the case is, scaled so that values above 1 fail; used to pick the worst case.
    badness: f64,
    /// One-line metrics for the table.
    line: String,
    /// Why the case fails (empty when it passes).
    why: Vec<String>,
    /// Float image only: (correlation, max|diff|/max).
    float: Option<(f64, f64)>,
}

impl Outcome {
    fn error(msg: impl Into<String>) -> Outcome {
        Outcome {
            pass: false,
            identical: false,
            badness: f64::INFINITY,
            line: "error".into(),
            why: vec![msg.into()],
            float: None,
        }
    }
}

/// Compare one kind of output over every selected case that `applies`, print the table and the
/// summary, and panic listing the failing cases.
fn check_kind(
    kind: &str,
    applies: impl Fn(&Case) -> bool,
    check: impl Fn(&Case, &Run) -> Result<Outcome, String>,
    extra_summary: impl Fn(&[(&Case, Outcome)]) -> String,
) {
    let selected: Vec<&Case> = cases().iter().filter(|c| applies(c)).collect();
    if selected.is_empty() {
        report(&format!("golden {kind}: no case selected\n"));
        return;
    }
    let runs = runs();
    let mut results: Vec<(&Case, Outcome)> = Vec::new();
    for case in selected {
        let outcome = match runs.get(&case.id) {
            None => Outcome::error("case was not run"),
            Some(run) => {
                let mut o = check(case, run).unwrap_or_else(Outcome::error);
                // A failed run fails every kind, also when it left usable files behind.
                if let Some(e) = &run.error {
                    o.pass = false;
                    o.identical = false;
                    o.badness = f64::INFINITY;
                    o.why.insert(0, e.clone());
                }
                o
            }
        };
        results.push((case, outcome));
    }

    let width = results.iter().map(|(c, _)| c.id.len()).max().unwrap_or(4);
    let mut out = format!("\n==== golden {kind}: {} cases ====\n", results.len());
    for (case, o) in &results {
        let time = runs
            .get(&case.id)
            .map(|r| format!("{:6.2}s", r.wall.as_secs_f64()))
            .unwrap_or_default();
        out += &format!(
            "{:<width$}  {}  {}  {}\n",
            case.id,
            if o.pass { "PASS" } else { "FAIL" },
            time,
            o.line
        );
        for w in &o.why {
            out += &format!("{:<width$}      - {w}\n", "");
        }
    }

    // Summary by family.
    let mut families: Vec<(&str, usize, usize, usize)> = Vec::new();
    for (case, o) in &results {
        let i = match families.iter().position(|f| f.0 == case.family) {
            Some(i) => i,
            None => {
                families.push((&case.family, 0, 0, 0));
                families.len() - 1
            }
        };
        families[i].1 += 1;
        families[i].2 += o.pass as usize;
        families[i].3 += o.identical as usize;
    }
    let fw = families.iter().map(|f| f.0.len()).max().unwrap_or(6).max(6);
    out += &format!(
        "\n---- golden {kind}: summary ----\n{:<fw$}  cases  pass  fail  identical\n",
        "family"
    );
    for (fam, n, pass, ident) in &families {
        out += &format!("{fam:<fw$}  {n:>5}  {pass:>4}  {:>4}  {ident:>9}\n", n - pass);
    }
    let n = results.len();
    let npass = results.iter().filter(|r| r.1.pass).count();
    let nident = results.iter().filter(|r| r.1.identical).count();
    out += &format!("{:<fw$}  {n:>5}  {npass:>4}  {:>4}  {nident:>9}\n", "TOTAL", n - npass);
    out += &extra_summary(&results);
    if let Some((case, o)) = results.iter().max_by(|a, b| a.1.badness.total_cmp(&b.1.badness)) {
        out += &format!("worst case: {}  {}\n", case.id, o.line);
    }
    let failing: Vec<&str> =
        results.iter().filter(|r| !r.1.pass).map(|r| r.0.id.as_str()).collect();
    out += &format!("golden {kind}: {npass}/{n} cases pass\n");
    report(&out);
    assert!(
        failing.is_empty(),
        "golden {kind}: {} of {n} cases fail: {}",
        failing.len(),
        failing.join(", ")
    );
}

// ---------------------------------------------------------------------------------------------
// float.bin

struct FloatCmp {
    corr: f64,
    rel: f64,
    bit_identical: bool,
}

fn float_compare(
    ours: &[u8],
    theirs: &[u8],
    fpixels: usize,
    npix: usize,
) -> Result<(FloatCmp, Vec<String>), String> {
    if theirs.len() != 4 * npix {
        return Err(format!(
            "reference float.bin has {} bytes, expected {}",
            theirs.len(),
            4 * npix
        ));
    }
    if ours.len() != theirs.len() {
        return Err(format!("float.bin has {} bytes, C has {}", ours.len(), theirs.len()));
    }
    let bit_identical = ours == theirs;
    let a = f32_image(ours);
    let b = f32_image(theirs);
    let mut why = Vec::new();
    let nonfinite = a.iter().filter(|v| !v.is_finite()).count();
    if nonfinite > 0 {
        why.push(format!("{nonfinite} non-finite pixels"));
    }
    let (corr, rel, worst) = agreement(&a, &b, MAX_REL_DIFF);
    if rel.is_infinite() && !b.iter().any(|v| *v != 0.0) {
        why.push("C image is all zero, ours is not".into());
    }
    if corr.is_nan() || corr < MIN_CORR {
        why.push(format!("correlation {corr:.8} < {MIN_CORR}"));
    }
    if rel.is_nan() || rel > MAX_REL_DIFF {
        why.push(format!(
            "max|diff|/max {rel:.3e} > {MAX_REL_DIFF:e} (at fast {} slow {}: ours {:e} vs C {:e})",
            worst % fpixels.max(1),
            worst / fpixels.max(1),
            a[worst],
            b[worst]
        ));
    }
    Ok((FloatCmp { corr, rel, bit_identical }, why))
}

fn check_float(case: &Case, run: &Run) -> Result<Outcome, String> {
    let theirs = case.golden_file("float.bin")?;
    let ours = run.file("float.bin")?;
    let (c, why) = float_compare(ours, &theirs, case.fpixels, case.npix())?;
    let badness = ((1.0 - c.corr) / (1.0 - MIN_CORR)).max(c.rel / MAX_REL_DIFF);
    Ok(Outcome {
        pass: why.is_empty(),
        identical: c.bit_identical,
        badness: if badness.is_nan() { f64::INFINITY } else { badness },
        line: format!(
            "corr={:.9}  max|d|/max={:.3e}  bit-identical={}",
            c.corr,
            c.rel,
            if c.bit_identical { "yes" } else { "no" }
        ),
        why,
        float: Some((c.corr, c.rel)),
    })
}

#[test]
fn float_parity() {
    check_kind(
        "float.bin",
        |c| c.has_output("float.bin"),
        check_float,
        |results| {
            let fl: Vec<(f64, f64)> = results.iter().filter_map(|(_, o)| o.float).collect();
            if fl.is_empty() {
                return String::new();
            }
            let min_corr = fl.iter().map(|x| x.0).fold(f64::INFINITY, f64::min);
            let max_rel = fl.iter().map(|x| x.1).fold(0.0, f64::max);
            format!(
                "compared {} images: min corr {min_corr:.9} (need >= {MIN_CORR}), \
                 max max|d|/max {max_rel:.3e} (need <= {MAX_REL_DIFF:e})\n",
                fl.len()
            )
        },
    );
}

// ---------------------------------------------------------------------------------------------
// SMV images (int.img, noise.img)

struct SmvCmp {
    header_identical: bool,
    header_issues: Vec<String>,
    differ: usize,
    max_diff: u32,
    npix: usize,
}

fn smv_compare(ours: &[u8], theirs: &[u8], npix: usize) -> Result<SmvCmp, String> {
    let c = parse_smv(theirs, npix).map_err(|e| format!("reference: {e}"))?;
    let o = parse_smv(ours, npix)?;
    let mut issues = Vec::new();
    // Pixel data offset: the C pads short headers to 512 bytes and writes longer ones
    // unpadded; we may pad those to 1024.
    if o.data_offset != c.data_offset && !(c.data_offset > 512 && o.data_offset == 1024) {
        issues.push(format!("pixel data at byte {}, C at {}", o.data_offset, c.data_offset));
    }
    let ckeys: Vec<&str> = c.fields.iter().map(|f| f.0.as_str()).collect();
    let okeys: Vec<&str> = o.fields.iter().map(|f| f.0.as_str()).collect();
    if ckeys != okeys {
        issues.push(format!(
            "header keys differ: ours [{}] vs C [{}]",
            okeys.join(" "),
            ckeys.join(" ")
        ));
    }
    for (k, cv) in &c.fields {
        let Some(ov) = o.field(k) else { continue };
        if ov == cv {
            continue;
        }
        if k == "HEADER_BYTES" && ov.parse::<usize>() == Ok(o.data_offset) {
            continue;
        }
        let ok = compare_tokens(&ov.replace(',', " "), &cv.replace(',', " "), 1e-5, 1e-9);
        if ok.is_err() {
            issues.push(format!("header {k}={ov}, C {k}={cv}"));
        }
    }
    let mut differ = 0;
    let mut max_diff = 0u32;
    for (&x, &y) in o.pixels.iter().zip(&c.pixels) {
        if x != y {
            differ += 1;
            max_diff = max_diff.max((x as i32 - y as i32).unsigned_abs());
        }
    }
    Ok(SmvCmp {
        header_identical: o.header == c.header,
        header_issues: issues,
        differ,
        max_diff,
        npix,
    })
}

fn smv_line(name: &str, s: &SmvCmp) -> String {
    format!(
        "{name}: header {} {}/{} px differ (max {})",
        if !s.header_issues.is_empty() {
            "DIFFERS,"
        } else if s.header_identical {
            "identical,"
        } else {
            "equivalent,"
        },
        s.differ,
        s.npix,
        s.max_diff
    )
}

fn check_int_pgm(case: &Case, run: &Run) -> Result<Outcome, String> {
    let mut lines = Vec::new();
    let mut why = Vec::new();
    let mut identical = true;
    let mut badness = 0f64;
    if case.has_output("int.img") {
        let theirs = case.golden_file("int.img")?;
        match run.file("int.img").and_then(|ours| smv_compare(ours, &theirs, case.npix())) {
            Ok(s) => {
                lines.push(smv_line("int.img", &s));
                identical &= s.header_identical && s.differ == 0 && run.files["int.img"] == theirs;
                if s.differ > 0 {
                    why.push(format!(
                        "int.img: {} pixels differ (max by {})",
                        s.differ, s.max_diff
                    ));
                }
                why.extend(s.header_issues.iter().map(|i| format!("int.img: {i}")));
                badness = badness.max(s.differ as f64 + s.header_issues.len() as f64);
            }
            Err(e) => {
                why.push(format!("int.img: {e}"));
                badness = f64::INFINITY;
                identical = false;
            }
        }
    }
    if case.has_output("image.pgm") {
        let theirs = case.golden_file("image.pgm")?;
        let res = run.file("image.pgm").and_then(|ours| {
            let c = parse_pgm(&theirs, case.npix()).map_err(|e| format!("reference: {e}"))?;
            let o = parse_pgm(ours, case.npix())?;
            Ok((o, c))
        });
        match res {
            Ok((o, c)) => {
                let mut issues = Vec::new();
                if o.lines.len() != c.lines.len() {
                    issues.push(format!(
                        "header ours {:?} vs C {:?}",
                        o.lines.join("\\n"),
                        c.lines.join("\\n")
                    ));
                } else {
                    for (ol, cl) in o.lines.iter().zip(&c.lines) {
                        if let Err(e) = compare_tokens(ol, cl, 1e-5, 0.0) {
                            issues.push(format!("header {e}"));
                        }
                    }
                }
                let differ = o.pixels.iter().zip(&c.pixels).filter(|(a, b)| a != b).count();
                let max_diff = o
                    .pixels
                    .iter()
                    .zip(&c.pixels)
                    .map(|(&a, &b)| (a as i32 - b as i32).unsigned_abs())
                    .max()
                    .unwrap_or(0);
                lines.push(format!(
                    "image.pgm: header {} {differ}/{} px differ (max {max_diff})",
                    if !issues.is_empty() {
                        "DIFFERS,"
                    } else if o.lines == c.lines {
                        "identical,"
                    } else {
                        "equivalent,"
                    },
                    case.npix()
                ));
                identical &= run.files["image.pgm"] == theirs;
                if differ > 0 {
                    why.push(format!("image.pgm: {differ} pixels differ (max by {max_diff})"));
                }
                badness = badness.max(differ as f64 + issues.len() as f64);
                why.extend(issues.into_iter().map(|i| format!("image.pgm: {i}")));
            }
            Err(e) => {
                why.push(format!("image.pgm: {e}"));
                badness = f64::INFINITY;
                identical = false;
            }
        }
    }
    Ok(Outcome {
        pass: why.is_empty(),
        identical,
        badness,
        line: lines.join("; "),
        why,
        float: None,
    })
}

#[test]
fn int_pgm_parity() {
    check_kind(
        "int.img/image.pgm",
        |c| c.has_output("int.img") || c.has_output("image.pgm"),
        check_int_pgm,
        |_| String::new(),
    );
}

fn check_noise(case: &Case, run: &Run) -> Result<Outcome, String> {
    let theirs = case.golden_file("noise.img")?;
    let s = smv_compare(run.file("noise.img")?, &theirs, case.npix())?;
    let frac = 1.0 - s.differ as f64 / s.npix as f64;
    let mut why: Vec<String> = s.header_issues.clone();
    if frac < MIN_NOISE_IDENTICAL {
        why.push(format!(
            "only {:.3}% of pixels identical (need {}%)",
            100.0 * frac,
            100.0 * MIN_NOISE_IDENTICAL
        ));
    }
    Ok(Outcome {
        pass: why.is_empty(),
        identical: run.files["noise.img"] == theirs,
        badness: (1.0 - frac) / (1.0 - MIN_NOISE_IDENTICAL) + s.header_issues.len() as f64,
        line: format!("{}; {:.4}% identical", smv_line("noise.img", &s), 100.0 * frac),
        why,
        float: None,
    })
}

#[test]
fn noise_parity() {
    check_kind("noise.img", |c| c.has_output("noise.img"), check_noise, |_| String::new());
}

// ---------------------------------------------------------------------------------------------
// Fdump.bin

fn check_fdump(case: &Case, run: &Run) -> Result<Outcome, String> {
    let theirs = case.golden_file("Fdump.bin")?;
    let ours = run.file("Fdump.bin")?;
    if ours == theirs.as_slice() {
        return Ok(Outcome {
            pass: true,
            identical: true,
            badness: 0.0,
            line: format!("byte-identical ({} bytes)", ours.len()),
            why: vec![],
            float: None,
        });
    }
    let mut why = Vec::new();
    let head = |b: &[u8]| {
        let end = b.iter().position(|&x| x == b'\n').unwrap_or(b.len().min(80));
        String::from_utf8_lossy(&b[..end]).into_owned()
    };
    if head(ours) != head(&theirs) {
        why.push(format!("header '{}' vs C '{}'", head(ours), head(&theirs)));
    }
    if ours.len() != theirs.len() {
        why.push(format!("{} bytes vs C {}", ours.len(), theirs.len()));
    }
    let first =
        ours.iter().zip(&theirs).position(|(a, b)| a != b).unwrap_or(ours.len().min(theirs.len()));
    why.push(format!("first differing byte at offset {first}"));
    Ok(Outcome {
        pass: false,
        identical: false,
        badness: 1.0 + (ours.len().max(theirs.len()) - first) as f64,
        line: format!("differs ({} bytes vs C {})", ours.len(), theirs.len()),
        why,
        float: None,
    })
}

#[test]
fn fdump_parity() {
    check_kind("Fdump.bin", |c| c.has_output("Fdump.bin"), check_fdump, |_| String::new());
}

// ---------------------------------------------------------------------------------------------
// console statistics

fn check_stdout(case: &Case, run: &Run) -> Result<Outcome, String> {
    // The noise photon count is reproducible only with an explicit -seed.
    let seeded = case.has_arg("-seed");
    let golden = case.golden_stdout()?;
    let theirs = stat_lines(&golden, seeded);
    let ours = stat_lines(&run.stdout, seeded);
    // With the maximum reached by several pixels, the position printed by the C depends on the
    // order its OpenMP threads happen to reach them (a race on the shared maximum); nanobragg
    // picks one deterministically (docs/compat.md), so only the value is compared then. Every
    // other line must match as text: the statistics are equal to the printed precision.
    let value_only = |l: &str| l.split(" at ").next().unwrap_or(l).trim().to_string();
    let max_ties = if case.has_output("float.bin") {
        let img = f32_image(&case.golden_file("float.bin")?);
        let max = img.iter().fold(f32::MIN, |m, &v| m.max(v));
        img.iter().filter(|&&v| v == max).count()
    } else {
        1
    };
    let mut why = Vec::new();
    let mut text_same = 0;
    let mut matched = 0;
    let mut used = vec![false; ours.len()];
    for (kind, cl) in &theirs {
        let found = ours.iter().enumerate().find(|(i, (k, _))| !used[*i] && k == kind);
        let Some((i, (_, ol))) = found else {
            why.push(format!("missing {kind} line (C: '{cl}')"));
            continue;
        };
        used[i] = true;
        let (ol, cl) = if *kind == "max_I" && max_ties > 1 {
            (&value_only(ol), &value_only(cl))
        } else {
            (ol, cl)
        };
        if ol == cl {
            text_same += 1;
            matched += 1;
        } else {
            let detail = compare_tokens(ol, cl, 1e-4, 1e-12).err().unwrap_or_default();
            why.push(format!("{kind}: '{ol}' vs C '{cl}' {detail}"));
        }
    }
    for (i, (kind, ol)) in ours.iter().enumerate() {
        if !used[i] {
            why.push(format!("extra {kind} line '{ol}' (not printed by the C)"));
        }
    }
    Ok(Outcome {
        pass: why.is_empty(),
        identical: why.is_empty() && text_same == theirs.len(),
        badness: why.len() as f64,
        line: format!(
            "{matched}/{} stats lines match ({text_same} text-identical){}",
            theirs.len(),
            if max_ties > 1 {
                format!("; max at {max_ties} pixels: position not compared")
            } else {
                String::new()
            }
        ),
        why,
        float: None,
    })
}

#[test]
fn stdout_stats_parity() {
    check_kind("stdout stats", |_| true, check_stdout, |_| String::new());
}

// ---------------------------------------------------------------------------------------------
// the vendored data itself (needs no binary)

#[test]
fn golden_data_is_consistent() {
    let mut bad = Vec::new();
    for case in common::all_cases() {
        for name in &case.outputs {
            match case.golden_file(name) {
                Err(e) => bad.push(format!("{}: {e}", case.id)),
                Ok(bytes) if name == "float.bin" => {
                    if bytes.len() != 4 * case.npix() {
                        bad.push(format!("{}: float.bin has {} bytes", case.id, bytes.len()));
                        continue;
                    }
                    let img = f32_image(&bytes);
                    let max = img.iter().fold(f32::MIN, |m, &v| m.max(v)) as f64;
                    let mean = img.iter().map(|&v| v as f64).sum::<f64>() / img.len() as f64;
                    let nonzero = img.iter().filter(|&&v| v != 0.0).count() as u64;
                    if let Some(st) = &case.float_stats {
                        if max != st.max
                            || nonzero != st.nonzero
                            || st.npix != case.npix() as u64
                            || !close(mean, st.mean, 1e-4, 0.0)
                        {
                            bad.push(format!(
                                "{}: float.bin stats max {max} mean {mean} nonzero {nonzero} \
                                 do not match cases.toml",
                                case.id
                            ));
                        }
                    }
                }
                Ok(_) => {}
            }
        }
        if case.golden_stdout().is_err() {
            bad.push(format!("{}: no stdout.txt", case.id));
        }
    }
    assert!(bad.is_empty(), "golden data problems:\n{}", bad.join("\n"));
}
