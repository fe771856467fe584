//! `cfmt` against glibc `printf` output recorded in `tests/data/cfmt_glibc.txt`.

use nanobragg_io::cfmt::{e, f, f_width, g, g_prec, g_width};

/// Our rendering of `x` with the formats listed in the data file's header, in order.
fn ours(x: f64) -> Vec<String> {
    vec![
        g(x),
        g_prec(x, 0),
        g_prec(x, 1),
        g_prec(x, 2),
        g_prec(x, 3),
        g_prec(x, 10),
        g_prec(x, 15),
        g_prec(x, 17),
        g_prec(x, 25),
        g_width(x, 15, 10),
        f(x, 6),
        f(x, 0),
        f(x, 1),
        f(x, 2),
        f(x, 3),
        f_width(x, 11, 8),
        f(x, 20),
        e(x, 6),
        e(x, 0),
        e(x, 3),
        e(x, 16),
    ]
}

#[test]
fn matches_recorded_glibc_output() {
    let data = include_str!("data/cfmt_glibc.txt");
    let mut lines = 0;
    let mut failures = Vec::new();
    for line in data.lines().filter(|l| !l.starts_with('#')) {
        let parts: Vec<&str> = line.split('|').collect();
        let x = f64::from_bits(u64::from_str_radix(parts[0], 16).unwrap());
        let mine = ours(x);
        assert_eq!(parts.len(), mine.len() + 1, "bad data line {line}");
        for (k, (m, c)) in mine.iter().zip(&parts[1..]).enumerate() {
            if m != c {
                failures.push(format!("{} format #{k}: glibc {c:?}, ours {m:?}", parts[0]));
            }
        }
        lines += 1;
    }
    assert!(lines > 200, "only {lines} data lines");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn named_cases() {
    // rounding ties to even on the exact binary value
    assert_eq!(f(0.5, 0), "0");
    assert_eq!(f(1.5, 0), "2");
    assert_eq!(f(2.5, 0), "2");
    assert_eq!(f(-2.5, 0), "-2");
    assert_eq!(f(0.125, 2), "0.12");
    assert_eq!(f(0.375, 2), "0.38");
    // 2.675 is below the tie in binary
    assert_eq!(f(2.675, 2), "2.67");
    assert_eq!(g(123456.5), "123456");
    assert_eq!(g(123457.5), "123458");
    assert_eq!(g(1234567.0), "1.23457e+06");
    assert_eq!(g(1234565.0), "1.23456e+06");
    assert_eq!(g(999999.5), "1e+06");
    assert_eq!(g(0.0001), "0.0001");
    assert_eq!(g(0.00001), "1e-05");
    assert_eq!(g(0.000123456), "0.000123456");
    assert_eq!(g(1e21), "1e+21");
    assert_eq!(g(1e-300), "1e-300");
    assert_eq!(g(100.0), "100");
    assert_eq!(g(1e6), "1e+06");
    assert_eq!(g(25.65), "25.65");
    assert_eq!(g(-7.25), "-7.25");
    assert_eq!(g(55000.0 / 396.78607177734375), "138.614");
    assert_eq!(g(f64::NAN), "nan");
    assert_eq!(g(-f64::NAN), "-nan");
    assert_eq!(g(f64::INFINITY), "inf");
    assert_eq!(f(f64::NEG_INFINITY, 3), "-inf");
    assert_eq!(g(-0.0), "-0");
    assert_eq!(f(-0.0, 1), "-0.0");
    assert_eq!(e(-0.0, 0), "-0e+00");
    assert_eq!(g_prec(1.0 / 3.0, 25), "0.3333333333333333148296163");
    assert_eq!(g_prec(0.1, 17), "0.10000000000000001");
    assert_eq!(f_width(-0.5, 11, 8), "-0.50000000");
    assert_eq!(f_width(123.0, 11, 8), "123.00000000");
    assert_eq!(g_width(0.001, 15, 10), "          0.001");
    assert_eq!(e(5e-324, 6), "4.940656e-324");
    assert_eq!(e(1.7976931348623157e308, 3), "1.798e+308");
    assert_eq!(f(1e21, 0), "1000000000000000000000");
}
