//! Shared helpers for the golden parity tests (`tests/golden.rs`).
//!
//! The golden set lives in `tests/golden/` at the workspace root (a vendored copy of the
//! reference outputs of the C nanoBragg, see `tests/golden/README.md`). Every case is one run
//! of the program: the helpers here parse `cases.toml`, run our `nanobragg` binary once per
//! case (in parallel, in a scratch directory with `inputs/` linked in), keep the outputs in
//! memory and decode the zstd-compressed reference files.
//!
//! Environment knobs (all optional):
//! - `GOLDEN_CASES=id1,id2`: only run cases whose id contains one of the comma-separated words.
//! - `GOLDEN_JOBS=N`: number of cases run at the same time (default: available parallelism).
//! - `GOLDEN_TIMEOUT=S`: per-case time limit in seconds (default 600).
//! - `GOLDEN_KEEP=1`: keep the scratch directories (under `target/tmp/golden-<pid>/`).
//! - `NANOBRAGG_BIN=path`: run another binary instead of the one cargo built.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde::Deserialize;

/// `float_stats` of a case (statistics of the reference float image).
#[derive(Debug, Clone, Deserialize)]
pub struct FloatStats {
    pub max: f64,
    pub mean: f64,
    pub nonzero: u64,
    pub npix: u64,
}

/// One `[[case]]` of `cases.toml`.
#[derive(Debug, Clone, Deserialize)]
pub struct Case {
    pub id: String,
    pub family: String,
    pub args: String,
    pub outputs: Vec<String>,
    pub fpixels: usize,
    pub spixels: usize,
    #[serde(default)]
    pub note: String,
    #[serde(default)]
    pub float_stats: Option<FloatStats>,
    #[serde(default)]
    pub sha256: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
struct CasesFile {
    case: Vec<Case>,
}

impl Case {
    pub fn npix(&self) -> usize {
        self.fpixels * self.spixels
    }

    /// The exact argument list of the reference run.
    pub fn argv(&self) -> Vec<&str> {
        self.args.split_whitespace().collect()
    }

    /// Rough relative run time, to start the slow cases first: pixels times the loop counts
    /// named on the command line.
    pub fn cost_estimate(&self) -> f64 {
        let argv = self.argv();
        let value = |flag: &str| -> f64 {
            argv.iter()
                .position(|a| *a == flag)
                .and_then(|i| argv.get(i + 1))
                .and_then(|v| v.parse::<f64>().ok())
                .filter(|v| *v >= 1.0)
                .unwrap_or(1.0)
        };
        let os = value("-oversample");
        self.npix() as f64
            * os
            * os
            * value("-phisteps")
            * value("-mosaic_dom")
            * value("-thicksteps")
            * value("-dispsteps")
            * value("-hdivsteps")
            * value("-vdivsteps")
    }

    /// Whether `flag` appears as a whole argument.
    pub fn has_arg(&self, flag: &str) -> bool {
        self.argv().contains(&flag)
    }

    /// Whether `name` is one of the stored outputs of this case.
    pub fn has_output(&self, name: &str) -> bool {
        self.outputs.iter().any(|o| o == name)
    }

    pub fn golden_out_dir(&self) -> PathBuf {
        golden_dir().join("out").join(&self.id)
    }

    /// The decompressed reference output `name` (from `out/<id>/<name>.zst`).
    pub fn golden_file(&self, name: &str) -> Result<Vec<u8>, String> {
        read_zst(&self.golden_out_dir().join(format!("{name}.zst")))
    }

    /// The console output of the reference run.
    pub fn golden_stdout(&self) -> Result<String, String> {
        let p = self.golden_out_dir().join("stdout.txt");
        fs::read(&p)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .map_err(|e| format!("cannot read {}: {e}", p.display()))
    }
}

/// `tests/golden` at the workspace root.
pub fn golden_dir() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden");
    p.canonicalize().unwrap_or(p)
}

/// Decompress a zstd file completely.
pub fn read_zst(path: &Path) -> Result<Vec<u8>, String> {
    let f = fs::File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let mut dec = ruzstd::decoding::StreamingDecoder::new(std::io::BufReader::new(f))
        .map_err(|e| format!("bad zstd header in {}: {e}", path.display()))?;
    let mut out = Vec::new();
    dec.read_to_end(&mut out).map_err(|e| format!("cannot decompress {}: {e}", path.display()))?;
    Ok(out)
}

/// All cases of `cases.toml`, in file order.
pub fn all_cases() -> Vec<Case> {
    let path = golden_dir().join("cases.toml");
    let text =
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let parsed: CasesFile =
        toml::from_str(&text).unwrap_or_else(|e| panic!("cannot parse {}: {e}", path.display()));
    parsed.case
}

/// The cases selected by `GOLDEN_CASES` (all when unset), in file order.
pub fn cases() -> &'static [Case] {
    static CASES: OnceLock<Vec<Case>> = OnceLock::new();
    CASES.get_or_init(|| {
        let all = all_cases();
        match std::env::var("GOLDEN_CASES") {
            Ok(sel) if !sel.trim().is_empty() => {
                let words: Vec<&str> =
                    sel.split(',').map(str::trim).filter(|w| !w.is_empty()).collect();
                all.into_iter().filter(|c| words.iter().any(|w| c.id.contains(w))).collect()
            }
            _ => all,
        }
    })
}

/// Runs the binary cargo built with `args` in `dir`.
pub fn nanobragg(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_nanobragg")).args(args).current_dir(dir).output().unwrap()
}

/// Runs the binary with `args` in `dir` on `threads` rayon threads
/// (`RAYON_NUM_THREADS`, as `nonbragg` and `noisify` take no `-threads`);
/// asserts that it succeeded and returns its standard output.
pub fn nanobragg_on_threads(dir: &Path, args: &[&str], threads: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_nanobragg"))
        .args(args)
        .env("RAYON_NUM_THREADS", threads)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The triclinic crystal of the batch and gradient tests: every structure
/// factor 100, a 70 80 90 75 85 95 cell.
pub const TRICLINIC: [&str; 9] = ["-default_F", "100", "-cell", "70", "80", "90", "75", "85", "95"];

/// A raw little-endian float32 image file, widened to f64.
pub fn float_file(path: &Path) -> Vec<f64> {
    f32_image(&fs::read(path).unwrap()).into_iter().map(f64::from).collect()
}

/// The binary under test.
pub fn binary() -> PathBuf {
    match std::env::var_os("NANOBRAGG_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_nanobragg")),
    }
}

/// What one run of our binary left behind.
#[derive(Debug)]
pub struct Run {
    /// Contents of the files named in the case's `outputs` that the run wrote.
    pub files: HashMap<String, Vec<u8>>,
    pub stdout: String,
    pub stderr: String,
    /// Set when the binary could not be started, timed out or exited unsuccessfully.
    pub error: Option<String>,
    pub wall: Duration,
}

impl Run {
    /// An output file, or an error saying it is missing.
    pub fn file(&self, name: &str) -> Result<&[u8], String> {
        self.files.get(name).map(Vec::as_slice).ok_or_else(|| format!("{name} was not written"))
    }
}

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok()?.trim().parse().ok()
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].join("\n")
}

fn link_inputs(dir: &Path) -> std::io::Result<()> {
    let src = golden_dir().join("inputs");
    let dst = dir.join("inputs");
    #[cfg(unix)]
    {
        if std::os::unix::fs::symlink(&src, &dst).is_ok() {
            return Ok(());
        }
    }
    fs::create_dir_all(&dst)?;
    for entry in fs::read_dir(&src)? {
        let entry = entry?;
        fs::copy(entry.path(), dst.join(entry.file_name()))?;
    }
    Ok(())
}

/// A fresh, empty scratch directory `nanobragg-<prefix>-<name>-<pid>` under
/// the system's temporary directory, for the tests that run the binary there.
pub fn scratch(prefix: &str, name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nanobragg-{prefix}-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).unwrap();
    d
}

fn scratch_root() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("golden-{}", std::process::id()))
}

/// Run our binary on one case in a fresh scratch directory.
pub fn run_case(case: &Case) -> Run {
    let t0 = Instant::now();
    let dir = scratch_root().join(&case.id);
    let mut run = Run {
        files: HashMap::new(),
        stdout: String::new(),
        stderr: String::new(),
        error: None,
        wall: Duration::ZERO,
    };
    let result = (|| -> Result<(), String> {
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        link_inputs(&dir).map_err(|e| format!("cannot provide inputs/: {e}"))?;
        let out = fs::File::create(dir.join(".stdout")).map_err(|e| e.to_string())?;
        let err = fs::File::create(dir.join(".stderr")).map_err(|e| e.to_string())?;
        let bin = binary();
        let mut child = Command::new(&bin)
            .args(case.argv())
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let limit = Duration::from_secs(env_usize("GOLDEN_TIMEOUT").unwrap_or(600) as u64);
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if t0.elapsed() > limit => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(format!("timed out after {}s", limit.as_secs()));
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                Err(e) => return Err(format!("wait failed: {e}")),
            }
        };
        run.stdout = String::from_utf8_lossy(&fs::read(dir.join(".stdout")).unwrap_or_default())
            .into_owned();
        run.stderr = String::from_utf8_lossy(&fs::read(dir.join(".stderr")).unwrap_or_default())
            .into_owned();
        for name in &case.outputs {
            if let Ok(bytes) = fs::read(dir.join(name)) {
                run.files.insert(name.clone(), bytes);
            }
        }
        if !status.success() {
            return Err(format!(
                "exited with {status}; stderr tail: {}",
                tail(&run.stderr, 5).replace('\n', " | ")
            ));
        }
        Ok(())
    })();
    run.error = result.err();
    run.wall = t0.elapsed();
    if std::env::var_os("GOLDEN_KEEP").is_none() {
        let _ = fs::remove_dir_all(&dir);
    }
    run
}

/// Print straight to the process's stderr, past the test harness's output capture, so that
/// reports show up in CI logs also for passing tests.
pub fn report(text: &str) {
    let stderr = std::io::stderr();
    let mut lock = stderr.lock();
    let _ = lock.write_all(text.as_bytes());
    let _ = lock.flush();
}

/// Runs of all selected cases, keyed by id. The first caller runs them (cases in parallel,
/// the expensive ones first); later and concurrent callers share the result, so every test kind
/// compares against the same single run of each case.
pub fn runs() -> &'static HashMap<String, Run> {
    static RUNS: OnceLock<HashMap<String, Run>> = OnceLock::new();
    RUNS.get_or_init(|| {
        let mut order: Vec<&Case> = cases().iter().collect();
        order.sort_by(|a, b| b.cost_estimate().total_cmp(&a.cost_estimate()));
        let jobs = env_usize("GOLDEN_JOBS")
            .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
            .unwrap_or(2)
            .clamp(1, order.len().max(1));
        report(&format!(
            "golden: running {} cases with {} ({jobs} at a time)\n",
            order.len(),
            binary().display()
        ));
        let t0 = Instant::now();
        let next = AtomicUsize::new(0);
        let done = AtomicUsize::new(0);
        let results = Mutex::new(HashMap::new());
        std::thread::scope(|s| {
            for _ in 0..jobs {
                s.spawn(|| loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    let Some(case) = order.get(i) else { break };
                    let run = run_case(case);
                    let n = done.fetch_add(1, Ordering::SeqCst) + 1;
                    report(&format!(
                        "golden: [{n:>2}/{}] {:<28} {:>7.2}s {}\n",
                        order.len(),
                        case.id,
                        run.wall.as_secs_f64(),
                        run.error.as_deref().unwrap_or("ok")
                    ));
                    results.lock().unwrap().insert(case.id.clone(), run);
                });
            }
        });
        report(&format!("golden: all runs done in {:.1}s\n", t0.elapsed().as_secs_f64()));
        let _ = fs::remove_dir(scratch_root());
        results.into_inner().unwrap()
    })
}

/// Decode a little-endian float32 image.
pub fn f32_image(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// An SMV image split into header and pixels.
#[derive(Debug)]
pub struct Smv {
    /// Header text from `{` to `}` inclusive.
    pub header: String,
    /// `KEY=VALUE` pairs of the header, in order (trailing `;` removed).
    pub fields: Vec<(String, String)>,
    /// Where the pixel data starts (file length minus 2 bytes per pixel).
    pub data_offset: usize,
    pub pixels: Vec<u16>,
}

impl Smv {
    pub fn field(&self, key: &str) -> Option<&str> {
        self.fields.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// Parse an SMV file of `npix` unsigned 16-bit pixels. The pixel data is taken to be the last
/// `2*npix` bytes, so headers of any padded size are accepted.
pub fn parse_smv(bytes: &[u8], npix: usize) -> Result<Smv, String> {
    if bytes.first() != Some(&b'{') {
        return Err("SMV file does not start with '{'".into());
    }
    let close = bytes.iter().position(|&b| b == b'}').ok_or("SMV header has no '}'")?;
    let need = 2 * npix;
    if bytes.len() < close + 1 + need {
        return Err(format!(
            "SMV file too short: {} bytes, header text {} bytes + {need} bytes of pixels",
            bytes.len(),
            close + 1
        ));
    }
    let data_offset = bytes.len() - need;
    let header = String::from_utf8_lossy(&bytes[..=close]).into_owned();
    let fields = header
        .trim_start_matches('{')
        .trim_end_matches('}')
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let (k, v) = l.split_once('=')?;
            Some((k.trim().to_string(), v.trim().trim_end_matches(';').to_string()))
        })
        .collect();
    let pixels =
        bytes[data_offset..].chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
    Ok(Smv { header, fields, data_offset, pixels })
}

/// A binary PGM split into header lines and pixels.
#[derive(Debug)]
pub struct Pgm {
    /// The header lines (magic, size, comments, maxval) without newlines.
    pub lines: Vec<String>,
    pub pixels: Vec<u8>,
}

/// Parse a `P5` PGM of `npix` pixels (the pixel data is taken to be the last `npix` bytes).
pub fn parse_pgm(bytes: &[u8], npix: usize) -> Result<Pgm, String> {
    if !bytes.starts_with(b"P5") {
        return Err("PGM does not start with P5".into());
    }
    if bytes.len() < npix {
        return Err(format!("PGM too short: {} bytes", bytes.len()));
    }
    let off = bytes.len() - npix;
    let header = String::from_utf8_lossy(&bytes[..off]);
    Ok(Pgm { lines: header.lines().map(str::to_string).collect(), pixels: bytes[off..].to_vec() })
}

/// Whether two numbers agree to `|a-b| <= rel*max(|a|,|b|) + abs`.
pub fn close(a: f64, b: f64, rel: f64, abs: f64) -> bool {
    if a == b {
        return true;
    }
    (a - b).abs() <= rel * a.abs().max(b.abs()) + abs
}

/// Compare two whitespace-separated texts token by token: tokens that are numbers (after
/// stripping surrounding `(`, `)`, `%`, `,`, `;`) must agree within `rel`/`abs`, all other
/// text must be identical. Returns a description of the first difference.
pub fn compare_tokens(ours: &str, theirs: &str, rel: f64, abs: f64) -> Result<(), String> {
    fn strip(t: &str) -> &str {
        t.trim_matches(|c| matches!(c, '(' | ')' | '%' | ',' | ';'))
    }
    let a: Vec<&str> = ours.split_whitespace().collect();
    let b: Vec<&str> = theirs.split_whitespace().collect();
    if a.len() != b.len() {
        return Err(format!("'{ours}' vs C '{theirs}'"));
    }
    for (x, y) in a.iter().zip(&b) {
        if x == y {
            continue;
        }
        let (sx, sy) = (strip(x), strip(y));
        let same_frame = x.replacen(sx, "", 1) == y.replacen(sy, "", 1);
        let num_ok = match (sx.parse::<f64>(), sy.parse::<f64>()) {
            (Ok(p), Ok(q)) => close(p, q, rel, abs),
            _ => false,
        };
        if !(same_frame && num_ok) {
            return Err(format!("'{ours}' vs C '{theirs}'"));
        }
    }
    Ok(())
}

/// The deterministic statistics lines of a nanoBragg console log, as (kind, line) pairs in
/// order. The noise-image photon count is only included when `with_noise` is set (it is
/// clock-seeded unless `-seed` is given).
pub fn stat_lines(stdout: &str, with_noise: bool) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    for line in stdout.lines() {
        let l = line.trim();
        let kind = if l.starts_with("max_I = ") {
            "max_I"
        } else if l.starts_with("mean= ") {
            "mean/rms/rmsd"
        } else if l.starts_with("intfile_scale = ") {
            "intfile_scale"
        } else if l.starts_with("pgm_scale = ") {
            "pgm_scale"
        } else if l.contains(" photons on noise image (") {
            if !with_noise {
                continue;
            }
            "noise photons"
        } else if l.starts_with("solid angle subtended by detector = ") {
            "solid angle"
        } else {
            continue;
        };
        out.push((kind, l.to_string()));
    }
    out
}

/// How closely two images agree: (Pearson correlation, max|a-b| / max|b|, index of the
/// largest difference). A NaN difference counts as infinite. When either image is constant
/// the correlation is undefined; it is then 1 if the relative difference is within
/// `const_tol`, else 0.
#[allow(dead_code)]
pub fn agreement(a: &[f32], b: &[f32], const_tol: f64) -> (f64, f64, usize) {
    let n = a.len().max(1) as f64;
    let (mut max_c, mut max_d, mut sa, mut sb) = (0f64, 0f64, 0f64, 0f64);
    let mut worst = 0usize;
    for (i, (&x, &y)) in a.iter().zip(b).enumerate() {
        let (x, y) = (x as f64, y as f64);
        max_c = max_c.max(y.abs());
        let d = (x - y).abs();
        if d > max_d || d.is_nan() {
            max_d = if d.is_nan() { f64::INFINITY } else { d };
            worst = i;
        }
        sa += x;
        sb += y;
    }
    let (ma, mb) = (sa / n, sb / n);
    let (mut sxx, mut syy, mut sxy) = (0f64, 0f64, 0f64);
    for (&x, &y) in a.iter().zip(b) {
        let (dx, dy) = (x as f64 - ma, y as f64 - mb);
        sxx += dx * dx;
        syy += dy * dy;
        sxy += dx * dy;
    }
    let rel = if max_c > 0.0 {
        max_d / max_c
    } else if max_d == 0.0 {
        0.0
    } else {
        f64::INFINITY
    };
    let corr = if max_d == 0.0 {
        1.0
    } else if sxx > 0.0 && syy > 0.0 {
        sxy / (sxx * syy).sqrt()
    } else if rel <= const_tol {
        1.0
    } else {
        0.0
    };
    (corr, rel, worst)
}

/// Whether this process ignores `signal` (as under `nohup`, or a shell's
/// background job for SIGINT): a child started from here then ignores it too.
pub fn signal_ignored(signal: u32) -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .unwrap_or(0);
    mask >> (signal - 1) & 1 == 1
}

/// `tests/<set>` at the workspace root: a golden set of another program of
/// the suite (`golden-noisify`, `golden-nonbragg`), laid out as `tests/golden`.
pub fn set_dir(set: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests").join(set)
}

/// All cases of the golden set `set`, in file order.
pub fn set_cases(set: &str) -> Vec<Case> {
    let path = set_dir(set).join("cases.toml");
    let text =
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let parsed: CasesFile =
        toml::from_str(&text).unwrap_or_else(|e| panic!("cannot parse {}: {e}", path.display()));
    parsed.case
}

/// A fresh directory for case `id` of the golden set `set`, holding a link
/// to the set's inputs.
pub fn set_scratch(set: &str, id: &str) -> PathBuf {
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{set}-{}-{id}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(
        set_dir(set).join("inputs").canonicalize().unwrap(),
        dir.join("inputs"),
    )
    .unwrap();
    dir
}

/// Relative L2 distance of `a` from the reference `r` (which must not be all zero).
pub fn rel_l2(a: &[f64], r: &[f64]) -> f64 {
    let (mut num, mut den) = (0.0, 0.0);
    for (a, r) in a.iter().zip(r) {
        num += (a - r) * (a - r);
        den += r * r;
    }
    assert!(den > 0.0);
    (num / den).sqrt()
}
