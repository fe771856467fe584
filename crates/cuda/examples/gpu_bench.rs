//! GPU benchmark of nanobragg-cuda.
//!
//! ```text
//! cargo run --release -p nanobragg-cuda --features cuda --example gpu_bench -- [--json OUT.json] [--quick] [--probe] [--no-cpu] [--only latency,batch,exafel] [--dtype f32|f64]
//! ```
//!
//! `--only` runs the named sections, `--dtype` one precision (both by
//! default); `NANOBRAGG_CUDA_MINBLOCKS` (see gpu.rs) tunes the launch bounds.
//!
//! Bench case: `-default_F 100 -cell 100 100 100 90 90 90 -lambda 6.2 -N 5
//! -distance 100 -detpixels N`.
//! * single-image latency at 1024², 2048², 4096² in f32 and f64: `device`
//!   (render, image left on the GPU), `+ D2H` (then `download` into a new or a
//!   reused `Vec`), `render() API` (a warm renderer's full output: image,
//!   solid-angle sum) and `cold render(plan)` (the one-shot function: device
//!   buffers, upload, render, copy; NVRTC and module already loaded);
//! * batch throughput: 100 random orientations at 4096² (images/s, each image
//!   copied back to pinned host memory and handed to a callback);
//! * ExaFEL-style load: 4096², `-dispersion 10 -dispsteps 100 -mosaic 0.5
//!   -mosaic_domains 25` (2500 source × domain samples per pixel), images/s;
//! * the CPU paths (`nanobragg_core::render::render`, fast f64, and
//!   `Precision::Exact64`, all cores) on the same cases for reference (ExaFEL
//!   extrapolated from a band of 16 rows).

use nanobragg_core::config::SimConfig;
use nanobragg_core::crystal::mosaic::mosaic_rotation_umat;
use nanobragg_core::render::Precision;
use nanobragg_core::render::{render, RenderOptions};
use nanobragg_core::rng::Ran1;
use nanobragg_core::setup::{Plan, SetupSeeds};
use nanobragg_cuda::{device_info, kernel_type_name, GpuRenderer, Shot};
use std::fmt::Write as _;
use std::time::Instant;

fn bench_config(n: i64) -> SimConfig {
    let mut c = SimConfig::default();
    c.sf.default_f = 100.0;
    c.crystal.cell = Some([100.0, 100.0, 100.0, 90.0, 90.0, 90.0]);
    c.beam.lambda_a = 6.2;
    (c.crystal.na, c.crystal.nb, c.crystal.nc) = (5.0, 5.0, 5.0);
    c.detector.distance_mm = 100.0;
    c.detector.fpixels = n;
    c.detector.spixels = n;
    c
}

fn exafel_config(n: i64) -> SimConfig {
    let mut c = bench_config(n);
    c.beam.dispersion_pct = 10.0;
    c.beam.dispsteps = 100;
    c.crystal.mosaic_deg = 0.5;
    c.crystal.mosaic_domains = 25;
    c
}

fn plan(c: &SimConfig) -> Plan {
    Plan::new(c, SetupSeeds { misset_idum: -1 }).expect("plan")
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn time<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed().as_secs_f64())
}

fn random_shots(p: &Plan, n: usize, seed: i64) -> Vec<Shot> {
    let mut rng = Ran1::new(-seed);
    (0..n).map(|_| Shot::rotated(p, &mosaic_rotation_umat(90.0, &mut rng))).collect()
}

struct Row {
    what: String,
    dtype: &'static str,
    size: usize,
    value: f64,
    unit: &'static str,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let no_cpu = args.iter().any(|a| a == "--no-cpu");
    let json = args.iter().position(|a| a == "--json").and_then(|i| args.get(i + 1).cloned());
    let only = args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1).cloned());
    let run = |section: &str| only.as_deref().is_none_or(|o| o.split(',').any(|s| s == section));
    let dtypes: Vec<Precision> =
        match args.iter().position(|a| a == "--dtype").and_then(|i| args.get(i + 1)) {
            Some(d) if d == "f32" => vec![Precision::Fast32],
            Some(d) if d == "f64" => vec![Precision::Exact64],
            _ => vec![Precision::Fast32, Precision::Exact64],
        };
    if let Ok(v) = std::env::var("NANOBRAGG_CUDA_MINBLOCKS") {
        println!("NANOBRAGG_CUDA_MINBLOCKS={v}");
    }

    let info = match device_info() {
        Ok(i) => i,
        Err(e) => {
            eprintln!("gpu_bench: {e}");
            std::process::exit(2);
        }
    };
    println!(
        "device: {} (sm_{}{}, {:.1} GiB)",
        info.name,
        info.compute_capability.0,
        info.compute_capability.1,
        info.total_mem as f64 / 1073741824.0
    );
    let mut rows: Vec<Row> = Vec::new();
    let mut push =
        |what: &str, dtype: &'static str, size: usize, value: f64, unit: &'static str| {
            println!("{what:<34} {dtype:<4} {size:>5}²  {value:>12.3} {unit}");
            rows.push(Row { what: what.into(), dtype, size, value, unit });
        };

    // start-up: context, NVRTC compile, module load (first renderer of each precision)
    for &dtype in &dtypes {
        let p = plan(&bench_config(64));
        let (r, t) = time(|| GpuRenderer::new(&p, dtype));
        if let Err(e) = r {
            eprintln!("gpu_bench: {e}");
            std::process::exit(2);
        }
        push("startup (context+NVRTC+upload)", kernel_type_name(dtype), 64, t * 1e3, "ms");
    }
    if args.iter().any(|a| a == "--probe") {
        return;
    }

    let sizes: &[usize] = match (run("latency"), quick) {
        (false, _) => &[],
        (true, true) => &[1024],
        (true, false) => &[1024, 2048, 4096],
    };
    for &n in sizes {
        let p = plan(&bench_config(n as i64));
        for &dtype in &dtypes {
            let (r, t_new) = time(|| GpuRenderer::new(&p, dtype));
            let mut r = r.expect("renderer");
            push("renderer setup (warm)", kernel_type_name(dtype), n, t_new * 1e3, "ms");
            r.render_to_device(None).expect("warm-up");
            let reps = 7;
            let dev = median(
                (0..reps).map(|_| time(|| r.render_to_device(None).expect("render")).1).collect(),
            );
            let dl =
                median((0..reps).map(|_| time(|| r.download().expect("download")).1).collect());
            let full = median((0..reps).map(|_| time(|| r.render().expect("render")).1).collect());
            push("latency: render, image on device", kernel_type_name(dtype), n, dev * 1e3, "ms");
            let mut reuse = Vec::new();
            let dl_reuse = median(
                (0..reps)
                    .map(|_| time(|| r.download_into(&mut reuse).expect("download")).1)
                    .collect(),
            );
            push(
                "latency: + D2H copy, new Vec",
                kernel_type_name(dtype),
                n,
                (dev + dl) * 1e3,
                "ms",
            );
            push(
                "latency: + D2H copy, reused Vec",
                kernel_type_name(dtype),
                n,
                (dev + dl_reuse) * 1e3,
                "ms",
            );
            push("latency: render() API (+omega)", kernel_type_name(dtype), n, full * 1e3, "ms");
            let (_, t1) = time(|| nanobragg_cuda::render(&p, dtype).expect("render"));
            push("latency: cold render(plan) call", kernel_type_name(dtype), n, t1 * 1e3, "ms");
        }
        if !no_cpu {
            let opts = RenderOptions::default();
            render::<f32>(&p, opts);
            let t = median((0..3).map(|_| time(|| render::<f32>(&p, opts)).1).collect());
            push("CPU latency, fast64 (all cores)", "f64", n, t * 1e3, "ms");
            let t = median(
                (0..3)
                    .map(|_| {
                        time(|| {
                            render::<f32>(
                                &p,
                                RenderOptions { precision: Precision::Exact64, ..opts },
                            )
                        })
                        .1
                    })
                    .collect(),
            );
            push("CPU latency, exact64 (all cores)", "f64", n, t * 1e3, "ms");
        }
    }

    // batch: 100 orientations at 4096²
    let n = if quick { 1024 } else { 4096 };
    let p = plan(&bench_config(n as i64));
    let shots = random_shots(&p, 100, 1);
    for &dtype in dtypes.iter().filter(|_| run("batch")) {
        let mut r = GpuRenderer::new(&p, dtype).expect("renderer");
        r.render_batch_with(&shots[..2], |_, _| {}).expect("warm-up");
        let mut check = 0.0f64;
        let (_, t) = time(|| {
            r.render_batch_with(&shots, |_, img| check += img[img.len() / 2 + n / 2] as f64)
                .expect("batch")
        });
        push("batch 100 orientations", kernel_type_name(dtype), n, shots.len() as f64 / t, "img/s");
        // compute only (no copy-back): one shot after the other on the device
        let (_, tc) = time(|| {
            for s in &shots[..20] {
                r.render_to_device(Some(s)).expect("render");
            }
        });
        push("batch compute only (no D2H)", kernel_type_name(dtype), n, 20.0 / tc, "img/s");
        std::hint::black_box(check);
    }

    // ExaFEL-style: dispersion 100 wavelengths x 25 mosaic domains
    let pe = plan(&exafel_config(n as i64));
    println!(
        "exafel plan: {} sources x {} cells = {} samples/pixel",
        pe.sources.list.len(),
        pe.cells_m.len(),
        pe.steps
    );
    for &dtype in dtypes.iter().filter(|_| run("exafel")) {
        let count = match (dtype, quick) {
            (_, true) => 2,
            (Precision::Fast32, false) => 10,
            (_, false) => 4,
        };
        let shots = random_shots(&pe, count, 7);
        let mut r = GpuRenderer::new(&pe, dtype).expect("renderer");
        r.render_to_device(Some(&shots[0])).expect("warm-up");
        let (_, t) = time(|| r.render_batch_with(&shots, |_, _| {}).expect("batch"));
        push("ExaFEL-style batch", kernel_type_name(dtype), n, count as f64 / t, "img/s");
    }
    if !no_cpu && run("exafel") {
        // CPU: a band of rows, extrapolated to the whole image
        let band = 16usize;
        let mut c = exafel_config(n as i64);
        c.detector.roi = Some([0, n as i64 - 1, (n / 2) as i64, (n / 2 + band - 1) as i64]);
        let pb = plan(&c);
        let scale = n as f64 / band as f64;
        let (_, t) = time(|| render::<f32>(&pb, RenderOptions::default()));
        push("CPU ExaFEL-style fast64 (extrap.)", "f64", n, t * scale, "s/img");
        let (_, t) = time(|| render::<f32>(&pb, RenderOptions::new(Precision::Exact64)));
        push("CPU ExaFEL-style exact64 (extrap.)", "f64", n, t * scale, "s/img");
    }

    if let Some(path) = json {
        let mut s = String::new();
        let date = std::process::Command::new("date")
            .arg("-u")
            .arg("+%Y-%m-%dT%H:%M:%SZ")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        let _ = write!(
            s,
            "{{\n  \"device\": {:?},\n  \"compute_capability\": \"{}.{}\",\n  \"date\": {:?},\n  \"results\": [\n",
            info.name, info.compute_capability.0, info.compute_capability.1, date
        );
        for (i, r) in rows.iter().enumerate() {
            let _ = writeln!(
                s,
                "    {{\"what\": {:?}, \"dtype\": {:?}, \"size\": {}, \"value\": {}, \"unit\": {:?}}}{}",
                r.what,
                r.dtype,
                r.size,
                r.value,
                r.unit,
                if i + 1 < rows.len() { "," } else { "" }
            );
        }
        s.push_str("  ]\n}\n");
        std::fs::write(&path, s).expect("write json");
        println!("wrote {path}");
    }
}
