//! C `printf`-compatible formatting of `f64` values.
//!
//! The functions here reproduce what glibc's `printf` prints for the conversions the
//! original program uses (`%g`, `%lg`, `%.Ng`, `%W.Pg`, `%f`, `%.Nf`, `%W.Pf`, `%e`):
//!
//! * digits are correctly rounded from the exact binary value, ties to even
//!   (`%.0f` of `0.5` is `0`, of `2.5` is `2`, of `3.5` is `4`);
//! * `%g` picks fixed or exponential notation by the C rule and strips trailing zeros;
//! * exponents have a sign and at least two digits (`1e+06`, `1.5e-07`);
//! * non-finite values print as `inf`, `-inf`, `nan`, `-nan` (sign of the NaN kept);
//! * negative zero, and negative values that round to zero, keep their `-` sign.
//!
//! Rust's own float formatting with an explicit precision is exact and rounds ties to
//! even, so the digits are taken from it and only the layout is adapted.

/// `inf`/`nan` spelling of glibc, or `None` for finite values.
fn non_finite(x: f64) -> Option<String> {
    if x.is_nan() {
        Some(if x.is_sign_negative() { "-nan" } else { "nan" }.to_string())
    } else if x.is_infinite() {
        Some(if x < 0.0 { "-inf" } else { "inf" }.to_string())
    } else {
        None
    }
}

fn sign_of(x: f64) -> &'static str {
    if x.is_sign_negative() {
        "-"
    } else {
        ""
    }
}

/// Splits Rust's `{:e}` output (`d.ddde-5`) into mantissa and decimal exponent.
fn split_exp(s: &str) -> (&str, i32) {
    let (mant, exp) = s.split_once('e').expect("Rust exponential formatting always contains 'e'");
    (mant, exp.parse().expect("exponent is an integer"))
}

/// Removes trailing zeros after a decimal point, and the point itself if nothing follows.
fn strip_trailing_zeros(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

/// C exponent suffix: `e+05`, `e-12`, `e+100`.
fn exp_suffix(exp: i32) -> String {
    format!("e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.unsigned_abs())
}

/// Right-aligns `s` in a field of `width` characters, padding with spaces on the left
/// (the C default for a field width without flags).
pub fn pad_left(s: &str, width: usize) -> String {
    format!("{s:>width$}")
}

/// Left-aligns `s` in a field of `width` characters (C `%-Ws`).
pub fn pad_right(s: &str, width: usize) -> String {
    format!("{s:<width$}")
}

/// C `%g` (and `%lg`): six significant digits.
///
/// ```
/// use nanobragg_io::cfmt::g;
/// assert_eq!(g(1e6), "1e+06");
/// assert_eq!(g(123456.5), "123456");
/// assert_eq!(g(0.0001), "0.0001");
/// assert_eq!(g(-0.0), "-0");
/// ```
pub fn g(x: f64) -> String {
    g_prec(x, 6)
}

/// C `%.Pg`: `prec` significant digits (a precision of 0 counts as 1).
pub fn g_prec(x: f64, prec: usize) -> String {
    if let Some(s) = non_finite(x) {
        return s;
    }
    let p = prec.max(1);
    let ax = x.abs();
    let sci = format!("{:.*e}", p - 1, ax);
    let (mant, exp) = split_exp(&sci);
    let body = if exp >= -4 && exp < p as i32 {
        // fixed notation with P-1-X decimals
        let decimals = (p as i32 - 1 - exp) as usize;
        let fixed = format!("{ax:.decimals$}");
        strip_trailing_zeros(&fixed).to_string()
    } else {
        format!("{}{}", strip_trailing_zeros(mant), exp_suffix(exp))
    };
    format!("{}{}", sign_of(x), body)
}

/// C `%W.Pg`: [`g_prec`] right-aligned in a field of `width` characters.
pub fn g_width(x: f64, width: usize, prec: usize) -> String {
    pad_left(&g_prec(x, prec), width)
}

/// C `%.Pf` (`%f` is `prec = 6`, `%.0f` is `prec = 0`).
///
/// ```
/// use nanobragg_io::cfmt::f;
/// assert_eq!(f(2.5, 0), "2");
/// assert_eq!(f(0.125, 2), "0.12");
/// assert_eq!(f(-0.001, 2), "-0.00");
/// ```
pub fn f(x: f64, prec: usize) -> String {
    if let Some(s) = non_finite(x) {
        return s;
    }
    format!("{}{:.*}", sign_of(x), prec, x.abs())
}

/// C `%W.Pf`, e.g. `%11.8f`: [`f`] right-aligned in a field of `width` characters.
pub fn f_width(x: f64, width: usize, prec: usize) -> String {
    pad_left(&f(x, prec), width)
}

/// C `%.Pe` (`%e` is `prec = 6`).
///
/// ```
/// use nanobragg_io::cfmt::e;
/// assert_eq!(e(1234.5, 6), "1.234500e+03");
/// assert_eq!(e(0.0, 2), "0.00e+00");
/// ```
pub fn e(x: f64, prec: usize) -> String {
    if let Some(s) = non_finite(x) {
        return s;
    }
    let sci = format!("{:.*e}", prec, x.abs());
    let (mant, exp) = split_exp(&sci);
    format!("{}{}{}", sign_of(x), mant, exp_suffix(exp))
}

/// C `%W.Pe`: [`e`] right-aligned in a field of `width` characters.
pub fn e_width(x: f64, width: usize, prec: usize) -> String {
    pad_left(&e(x, prec), width)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_shapes() {
        assert_eq!(g(0.0), "0");
        assert_eq!(g(1.0), "1");
        assert_eq!(g(100.0), "100");
        assert_eq!(g(1e-5), "1e-05");
        assert_eq!(g(1e100), "1e+100");
        assert_eq!(g(f64::INFINITY), "inf");
        assert_eq!(g(f64::NEG_INFINITY), "-inf");
        assert_eq!(g(f64::NAN), "nan");
        assert_eq!(g(-f64::NAN), "-nan");
        assert_eq!(g_prec(0.5, 0), "0.5");
        assert_eq!(f_width(1.5, 11, 8), " 1.50000000");
        assert_eq!(g_width(3.25, 15, 10), "           3.25");
        assert_eq!(e_width(-1.0, 10, 1), "  -1.0e+00");
        assert_eq!(pad_right("ab", 4), "ab  ");
    }
}
