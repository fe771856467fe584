//! Rotation series (`-images N`, an `-expt` scan): image k equals the same
//! command rendered alone with `-phi` + k·`-osc` and `-seed` + k, whether
//! the series is written as one NXmx file, as numbered files, split among
//! shards or resumed.

use std::path::Path;
use std::process::Output;

mod common;
use common::{nanobragg, scratch, TRICLINIC};

const BASE: [&str; 12] = [
    "-N",
    "4",
    "-lambda",
    "1.0",
    "-distance",
    "100",
    "-detpixels",
    "64",
    "-seed",
    "7",
    "-osc",
    "0.5",
];

/// Runs the triclinic crystal at 64² with `extra`; must succeed.
fn run(dir: &Path, extra: &[&str]) -> Output {
    let out = nanobragg(dir, &[&TRICLINIC[..], &BASE, extra].concat());
    assert!(out.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// Runs with `extra`; must fail; its message.
fn refused(dir: &Path, extra: &[&str]) -> String {
    let out = nanobragg(dir, &[&TRICLINIC[..], &BASE, extra].concat());
    assert!(!out.status.success(), "{extra:?} succeeded");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!err.contains("panicked"), "{err}");
    err
}

fn frame(path: &Path, k: usize) -> Vec<f64> {
    nanobragg_io::read_image::read_image(path, k).unwrap().pixels
}

#[test]
fn series_images_equal_single_renders() {
    let dir = scratch("series", "eq");
    let images = ["-phi", "30", "-images", "4", "-nxmxfile", "s.nxs", "-noisefile", "n.img"];
    run(&dir, &[&images[..], &["-floatfile", "f.bin"]].concat());
    let all = nanobragg_io::read_image::read_image(&dir.join("s.nxs"), 0).unwrap();
    assert_eq!((all.fpixels, all.spixels, all.frames), (64, 64, 4));
    let mut previous: Option<Vec<u8>> = None;
    for k in 0..4 {
        let (phi, seed) = (format!("{}", 30.0 + 0.5 * k as f64), format!("{}", 7 + k));
        let alone = ["-phi", &phi, "-seed", &seed, "-nxmxfile", "a.nxs", "-noisefile", "a.img"];
        run(&dir, &[&alone[..], &["-floatfile", "a.bin"]].concat());
        assert!(frame(&dir.join("s.nxs"), k) == frame(&dir.join("a.nxs"), 0), "frame {k}");
        for (numbered, single) in [("n", "a.img"), ("f", "a.bin")] {
            let ext = single.split('.').nth(1).unwrap();
            let name = format!("{numbered}_{:05}.{ext}", k + 1);
            let ours = std::fs::read(dir.join(&name)).unwrap();
            assert!(ours == std::fs::read(dir.join(single)).unwrap(), "{name}");
        }
        let float = std::fs::read(dir.join("a.bin")).unwrap();
        assert!(previous.as_ref() != Some(&float), "image {k} is the image before it");
        previous = Some(float);
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn shards_and_resume_give_the_whole_series() {
    let dir = scratch("series", "shards");
    let images = ["-phi", "30", "-images", "5", "-nxmxfile", "w.nxs", "-noisefile", "n.img"];
    run(&dir, &images);
    for shard in ["0/2", "1/2"] {
        let part = ["-nxmxfile", "p.nxs", "-noisefile", "q.img", "-shard", shard];
        run(&dir, &[&images[..], &part].concat());
    }
    // worker w of 2 renders images [w·5/2, (w+1)·5/2): 1–2 and 3–5
    for (k, (part, at)) in
        [("p_00001-00002.nxs", 0), ("p_00001-00002.nxs", 1), ("p_00003-00005.nxs", 0)]
            .into_iter()
            .enumerate()
    {
        assert!(frame(&dir.join("w.nxs"), k) == frame(&dir.join(part), at), "image {}", k + 1);
    }
    assert!(frame(&dir.join("w.nxs"), 4) == frame(&dir.join("p_00003-00005.nxs"), 2));
    // -resume renders only the image whose file is missing
    let kept = std::fs::read(dir.join("n_00002.img")).unwrap();
    std::fs::remove_file(dir.join("n_00004.img")).unwrap();
    let out = run(&dir, &[&images[..], &["-resume"]].concat());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("image 4:") && !stdout.contains("image 2:"), "{stdout}");
    assert_eq!(std::fs::read(dir.join("n_00002.img")).unwrap(), kept);
    let alone = ["-phi", "31.5", "-seed", "10", "-noisefile", "a.img"];
    run(&dir, &alone);
    assert!(
        std::fs::read(dir.join("n_00004.img")).unwrap()
            == std::fs::read(dir.join("a.img")).unwrap()
    );
    // another command's files are not resumed
    std::fs::remove_file(dir.join("n_00004.img")).unwrap();
    let other = [&images[..], &["-resume", "-seed", "8"]].concat();
    let out = nanobragg(&dir, &[&TRICLINIC[..], &BASE, &other].concat());
    let e = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(e.contains("n_series.txt") && e.contains("another command"), "{e}");
    assert!(!dir.join("n_00004.img").exists());
    // a block's NXmx file that holds its images is kept; one of another
    // command is written again
    let part = ["-nxmxfile", "p.nxs", "-noisefile", "q.img", "-shard", "1/2"];
    let block = [&images[..], &part].concat();
    let before = std::fs::read(dir.join("p_00003-00005.nxs")).unwrap();
    let out = run(&dir, &[&block[..], &["-resume"]].concat());
    assert!(String::from_utf8_lossy(&out.stdout).contains("kept"));
    assert_eq!(std::fs::read(dir.join("p_00003-00005.nxs")).unwrap(), before);
    let only_nxmx = ["-phi", "30", "-images", "5", "-nxmxfile", "p.nxs", "-shard", "1/2"];
    let out = run(&dir, &[&only_nxmx[..], &["-resume", "-N", "3"]].concat());
    assert!(!String::from_utf8_lossy(&out.stdout).contains("kept"));
    assert!(frame(&dir.join("p_00003-00005.nxs"), 0) != frame(&dir.join("w.nxs"), 2));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn what_a_series_cannot_do_is_refused() {
    let dir = scratch("series", "refused");
    std::fs::write(dir.join("shots.txt"), "0 0 0\n").unwrap();
    let series = ["-images", "3"];
    let e = refused(&dir, &[&series[..], &["-batch", "shots.txt"]].concat());
    assert!(e.contains("-batch") && e.contains("rotation series"), "{e}");
    let e = refused(&dir, &[&series[..], &["-printout"]].concat());
    assert!(e.contains("-printout"), "{e}");
    let e = refused(&dir, &["-shard", "0/2"]);
    assert!(e.contains("-shard") && e.contains("rotation series"), "{e}");
    let e = refused(&dir, &["-images", "0"]);
    assert!(e.contains("-images"), "{e}");
    // a clock seed would differ between the shards
    let unseeded: Vec<&str> = [&TRICLINIC[..], &BASE[..8], &series, &["-shard", "0/2"]].concat();
    let out = nanobragg(&dir, &unseeded);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && e.contains("-seed"), "{e}");
    // and a random orientation without its seed
    let e = refused(&dir, &[&series[..], &["-misset", "random", "-shard", "0/2"]].concat());
    assert!(e.contains("-misset_seed"), "{e}");
    let refine = ["refine", "-observed", "x.bin", "-refine", "distance"];
    let out = nanobragg(&dir, &[&refine[..], &TRICLINIC, &BASE, &series].concat());
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && e.contains("refine: -images"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

/// An `-expt` scan of three images (dxtbx's `properties` form) renders
/// three images; the first equals a one-image scan at its angle.
#[test]
fn expt_scan_renders_each_image() {
    let dir = scratch("series", "expt");
    let expt = |range: &str, properties: &str| {
        format!(
            r#"{{"__id__": "ExperimentList",
 "experiment": [{{"__id__": "Experiment", "beam": 0, "detector": 0, "crystal": 0,
   "goniometer": 0, "scan": 0}}],
 "beam": [{{"direction": [0.0, 0.0, 1.0], "wavelength": 1.0,
   "polarization_normal": [0.0, 1.0, 0.0], "polarization_fraction": 0.999}}],
 "detector": [{{"panels": [{{"name": "p", "origin": [-4.8, 4.8, -100.0],
   "fast_axis": [1.0, 0.0, 0.0], "slow_axis": [0.0, -1.0, 0.0],
   "pixel_size": [0.15, 0.15], "image_size": [64, 64]}}]}}],
 "crystal": [{{"real_space_a": [70.0, 0.0, 0.0], "real_space_b": [0.0, 80.0, 0.0],
   "real_space_c": [0.0, 0.0, 90.0]}}],
 "goniometer": [{{"rotation_axis": [1.0, 0.0, 0.0]}}],
 "scan": [{{"image_range": {range}, "properties": {properties}}}]}}"#
        )
    };
    std::fs::write(
        dir.join("three.expt"),
        expt("[1, 3]", r#"{"oscillation": [10.0, 10.5, 11.0], "exposure_time": [0.2, 0.2, 0.2]}"#),
    )
    .unwrap();
    std::fs::write(
        dir.join("one.expt"),
        expt("[2, 2]", r#"{"oscillation": [10.5], "oscillation_width": [0.5]}"#),
    )
    .unwrap();
    let model = ["-default_F", "100", "-N", "4", "-nonoise"];
    let ok = |args: &[&str]| {
        let out = nanobragg(&dir, &[&model[..], args].concat());
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let out = ok(&["-expt", "three.expt", "-floatfile", "t.bin"]);
    assert!(out.contains("image 3: phi 11 to 11.5 deg"), "{out}");
    let single = ok(&["-expt", "one.expt", "-floatfile", "o.bin"]);
    assert!(!single.contains("image 2:"), "a one-image scan is one image: {single}");
    let o = std::fs::read(dir.join("o.bin")).unwrap();
    assert_eq!(o.len(), 64 * 64 * 4);
    assert!(o == std::fs::read(dir.join("t_00002.bin")).unwrap(), "image 2 of the scan");
    assert!(o != std::fs::read(dir.join("t_00001.bin")).unwrap());
    std::fs::remove_dir_all(&dir).ok();
}
