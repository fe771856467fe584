//! Structure factors from an atomic model: `-model` renders what the
//! `.hkl` file `nanobragg sf` writes renders, and bad models, flags and
//! combinations are refused with a message naming them.

mod common;

use common::{float_file, nanobragg, scratch};
use std::fs;

/// A small P 21 21 21 model: carbon, oxygen and iron, partial occupancies,
/// one anisotropic atom.
const MODEL: &str = "\
CRYST1   24.000   28.000   32.000  90.00  90.00  90.00 P 21 21 21    4
ATOM      1  CA  ALA A   1       3.100   4.200   5.300  1.00 12.00           C
ATOM      2  O   ALA A   1       8.700   2.100  11.600  0.70 20.00           O
ANISOU    2  O   ALA A   1     2600   2400   2800    100   -200    150       O
HETATM    3 FE   FES A   2      12.300  15.400   7.800  1.00 15.00          FE
ATOM      4  C   ALA A   1      17.200  22.900  26.100  0.50 30.00           C
END
";

const RENDER: [&str; 16] = [
    "-N",
    "3",
    "-lambda",
    "1.0",
    "-distance",
    "60",
    "-detpixels",
    "48",
    "-pixel",
    "0.2",
    "-oversample",
    "1",
    "-nopgm",
    "-dmin",
    "2.2",
    "-nointerpolate",
];

#[test]
fn model_renders_as_the_hkl_sf_writes() {
    let dir = scratch("model", "render");
    fs::write(dir.join("m.pdb"), MODEL).unwrap();
    // (the .hkl reaches past the render's -dmin, as -model's own table does)
    let sf = nanobragg(&dir, &["sf", "-model", "m.pdb", "-dmin", "1.5", "-hkl", "m.hkl"]);
    assert!(sf.status.success(), "{}", String::from_utf8_lossy(&sf.stderr));
    let text = fs::read_to_string(dir.join("m.hkl")).unwrap();
    assert!(text.lines().count() > 1000, "{} reflections", text.lines().count());

    let from_model =
        [&RENDER[..], &["-model", "m.pdb", "-floatfile", "a.bin", "-dump", "a.dump"]].concat();
    // (the model gives its cell; the .hkl render is told it)
    let cell = ["-cell", "24", "28", "32", "90", "90", "90"];
    let from_hkl =
        [&RENDER[..], &cell, &["-hkl", "m.hkl", "-floatfile", "b.bin", "-dump", "b.dump"]].concat();
    for args in [&from_model, &from_hkl] {
        let out = nanobragg(&dir, args);
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let (a, b) = (float_file(&dir.join("a.bin")), float_file(&dir.join("b.bin")));
    let peak = a.iter().cloned().fold(0.0, f64::max);
    assert!(peak > 0.0, "an empty image");
    // the .hkl holds F in full (Rust's shortest round-trip digits): the
    // images agree to the float file's rounding
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        assert!(
            (x - y).abs() <= 1e-6 * x.abs().max(1e-30),
            "pixel {i}: {x} from -model, {y} from -hkl"
        );
    }
}

#[test]
fn anomalous_scattering_breaks_friedel() {
    let dir = scratch("model", "friedel");
    fs::write(dir.join("m.pdb"), MODEL).unwrap();
    let run = |extra: &[&str], out: &str| {
        let args = [&["sf", "-model", "m.pdb", "-dmin", "3", "-hkl", out][..], extra].concat();
        let o = nanobragg(&dir, &args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let text = fs::read_to_string(dir.join(out)).unwrap();
        let map: std::collections::HashMap<[i32; 3], f64> = text
            .lines()
            .map(|l| {
                let v: Vec<&str> = l.split_whitespace().collect();
                ([0, 1, 2].map(|i| v[i].parse().unwrap()), v[3].parse().unwrap())
            })
            .collect();
        map
    };
    let plain = run(&[], "p.hkl");
    let anomalous = run(&["-anomalous", "Fe", "-7.5", "3.9"], "a.hkl");
    let mut worst_plain: f64 = 0.0;
    let mut largest: f64 = 0.0;
    for (h, f) in &plain {
        let mate = plain[&h.map(|x| -x)];
        worst_plain = worst_plain.max((f - mate).abs() / f.max(1e-9));
        let (fa, fb) = (anomalous[h], anomalous[&h.map(|x| -x)]);
        largest = largest.max((fa - fb).abs() / fa.max(1e-9));
    }
    assert!(worst_plain < 1e-12, "Friedel's law broken without f'': {worst_plain:e}");
    assert!(largest > 0.01, "f'' made no Bijvoet difference: {largest:e}");
}

#[test]
fn bad_models_and_combinations_are_refused() {
    let dir = scratch("model", "refused");
    fs::write(dir.join("m.pdb"), MODEL).unwrap();
    fs::write(dir.join("m.hkl"), "1 2 3 100\n").unwrap();
    fs::write(dir.join("x.pdb"), MODEL.replace("          FE\n", "          XX\n")).unwrap();
    fs::write(dir.join("nocell.pdb"), MODEL.lines().skip(1).collect::<Vec<_>>().join("\n"))
        .unwrap();
    let base = ["-N", "2", "-detpixels", "8", "-floatfile", "o.bin", "-nopgm"];
    let cases: [(&[&str], &str); 6] = [
        (&["-model", "m.pdb", "-hkl", "m.hkl"], "-model and -hkl"),
        (&["-anomalous", "Fe", "1", "2"], "-anomalous"),
        (&["-model", "m.pdb", "-anomalous", "Qq", "1", "2"], "Qq"),
        (&["-model", "m.pdb", "-spacegroup", "P 7"], "P 7"),
        (&["-model", "x.pdb"], "line 5"),
        (&["-model", "nocell.pdb"], "cell"),
    ];
    for (extra, says) in cases {
        let args = [&base[..], extra].concat();
        let out = nanobragg(&dir, &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} was accepted");
        assert!(err.contains(says), "{extra:?}: {err}");
        assert!(!dir.join("o.bin").exists(), "{extra:?} wrote an image");
    }
    let sf = nanobragg(&dir, &["sf", "-model", "m.pdb", "-hkl", "o.hkl"]);
    assert!(!sf.status.success());
    assert!(String::from_utf8_lossy(&sf.stderr).contains("-dmin"));
}

#[test]
fn an_asymmetric_unit_is_expanded_by_its_space_group() {
    let dir = scratch("model", "expand");
    // P 21 21 21's asymmetric unit (h, k, l ≥ 0) to index 5, and the same
    // written out in full: with the Friedel mates every sign combination
    let (mut asu, mut full) = (String::new(), String::new());
    for h in 0..=5i32 {
        for k in 0..=5i32 {
            for l in 0..=5i32 {
                let f = 10 + h + 3 * k + 7 * l;
                asu += &format!("{h} {k} {l} {f}\n");
                let mut signs: Vec<[i32; 3]> = Vec::new();
                for sh in [1, -1] {
                    for sk in [1, -1] {
                        for sl in [1, -1] {
                            let e = [sh * h, sk * k, sl * l];
                            if !signs.contains(&e) {
                                signs.push(e);
                                full += &format!("{} {} {} {f}\n", e[0], e[1], e[2]);
                            }
                        }
                    }
                }
            }
        }
    }
    fs::write(dir.join("asu.hkl"), asu).unwrap();
    fs::write(dir.join("full.hkl"), full).unwrap();
    let base = [
        "-cell",
        "20",
        "20",
        "20",
        "90",
        "90",
        "90",
        "-N",
        "3",
        "-lambda",
        "1.0",
        "-distance",
        "40",
        "-detpixels",
        "64",
        "-pixel",
        "0.3",
        "-oversample",
        "1",
        "-nopgm",
        "-nointerpolate",
    ];
    let asu = [
        &base[..],
        &["-hkl", "asu.hkl", "-spacegroup", "P 21 21 21", "-floatfile", "a.bin", "-dump", "a.dump"],
    ]
    .concat();
    let listed =
        [&base[..], &["-hkl", "full.hkl", "-floatfile", "b.bin", "-dump", "b.dump"]].concat();
    for args in [&asu, &listed] {
        let out = nanobragg(&dir, args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    let (a, b) = (float_file(&dir.join("a.bin")), float_file(&dir.join("b.bin")));
    assert!(a.iter().any(|x| *x > 0.0), "an empty image");
    assert!(a == b, "the expanded asymmetric unit renders differently from the listed reflections");
}
