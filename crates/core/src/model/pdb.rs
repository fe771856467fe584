//! The PDB format: fixed-column records, of which CRYST1, ATOM, HETATM,
//! ANISOU, MODEL, ENDMDL and END are read and the rest skipped.

use super::{finish, malformed, parse_number, Atom, Element, Model};
use crate::error::{shown, Result};
use std::collections::HashMap;
use std::path::Path;

/// Parse the contents of a PDB file; `path` is only used in error messages.
///
/// - The unit cell and space group come from the first CRYST1 record, which
///   must be there.
/// - Of several MODEL … ENDMDL blocks only the first is read; END stops the
///   reading.
/// - The element is taken from columns 77–78; when they are blank, from the
///   atom name in columns 13–14 (see [`element_from_name`]).
/// - Blank occupancy reads as 1 and blank B as 0, for the coordinate-only
///   files some modelling programs write; blank coordinates are errors.
/// - An ANISOU record belongs to the ATOM or HETATM record of the same serial
///   number, normally the one just before it; one that matches none is an
///   error.
pub fn parse_pdb(bytes: &[u8], path: &Path) -> Result<Model> {
    let mut cell: Option<([f64; 6], usize, String)> = None;
    let mut atoms: Vec<Atom> = Vec::new();
    // Serial numbers are compared as text: files over 99999 atoms write them
    // in hybrid-36 or as stars, and only equality matters here.
    let mut by_serial: HashMap<String, usize> = HashMap::new();
    let mut last_serial = String::new();
    let mut model_started = false;
    let mut first_model_done = false;

    for (i, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let n = i + 1;
        let line = raw.strip_suffix(b"\r").unwrap_or(raw);
        let record = String::from_utf8_lossy(cols(line, 1, 6)).trim_end().to_ascii_uppercase();
        match record.as_str() {
            "CRYST1" if cell.is_none() => cell = Some(cryst1(line, n, path)?),
            "MODEL" => {
                // A second MODEL without ENDMDL before it still ends the first.
                first_model_done |= model_started;
                model_started = true;
            }
            "ENDMDL" => first_model_done = true,
            "END" => break,
            "ANISOU" if !first_model_done => {
                let (serial, u) = anisou(line, n, path)?;
                let index = if !atoms.is_empty() && serial == last_serial {
                    Some(atoms.len() - 1)
                } else {
                    by_serial.get(&serial).copied()
                };
                let Some(index) = index else {
                    return Err(malformed(
                        path,
                        format!(
                            "line {n}: ANISOU serial {} matches no ATOM record",
                            shown(&serial)
                        ),
                    ));
                };
                atoms[index].u_aniso_a2 = Some(u);
            }
            r if !first_model_done && is_atom_record(r) => {
                let (serial, atom) = atom(line, n, r, path)?;
                by_serial.insert(serial.clone(), atoms.len());
                last_serial = serial;
                atoms.push(atom);
            }
            _ => {}
        }
    }

    let Some((cell, cell_line, space_group)) = cell else {
        return Err(malformed(path, "no CRYST1 record: the model has no unit cell".to_string()));
    };
    finish(cell, cell_line, space_group, None, atoms, path)
}

/// ATOM and HETATM, allowing for a serial number that overflowed into
/// column 6 (`ATOM 100000`).
fn is_atom_record(record: &str) -> bool {
    record == "ATOM" || record == "HETATM" || record.starts_with("ATOM ")
}

/// Bytes of columns `first..=last` (1-based) of `line`, clipped to its length.
fn cols(line: &[u8], first: usize, last: usize) -> &[u8] {
    let end = last.min(line.len());
    line.get(first - 1..end).unwrap_or(&[])
}

/// Columns `first..=last` as text with blanks at the ends removed; the
/// columns must hold ASCII, as the format requires.
fn text<'l>(line: &'l [u8], first: usize, last: usize, n: usize, path: &Path) -> Result<&'l str> {
    let bytes = cols(line, first, last);
    if !bytes.is_ascii() {
        return Err(malformed(
            path,
            format!("line {n}: columns {first}-{last} are not ASCII text"),
        ));
    }
    // ASCII was just checked, so this cannot fail.
    Ok(std::str::from_utf8(bytes).unwrap_or("").trim())
}

/// A number in columns `first..=last`, or `default` when they are blank (an
/// error when there is no default); `what` names it in messages.
fn number(
    line: &[u8],
    (first, last): (usize, usize),
    what: &str,
    default: Option<f64>,
    n: usize,
    path: &Path,
) -> Result<f64> {
    let t = text(line, first, last, n, path)?;
    if t.is_empty() {
        return default.ok_or_else(|| {
            malformed(path, format!("line {n}: no {what} in columns {first}-{last}"))
        });
    }
    parse_number(t).ok_or_else(|| {
        malformed(path, format!("line {n}: {what} \"{}\" is not a number", shown(t)))
    })
}

/// Cell, line and space group of a CRYST1 record.
fn cryst1(line: &[u8], n: usize, path: &Path) -> Result<([f64; 6], usize, String)> {
    const FIELDS: [(usize, usize, &str); 6] = [
        (7, 15, "cell length a"),
        (16, 24, "cell length b"),
        (25, 33, "cell length c"),
        (34, 40, "cell angle alpha"),
        (41, 47, "cell angle beta"),
        (48, 54, "cell angle gamma"),
    ];
    let mut cell = [0.0; 6];
    for (v, &(first, last, what)) in cell.iter_mut().zip(FIELDS.iter()) {
        *v = number(line, (first, last), what, None, n, path)?;
    }
    let space_group = text(line, 56, 66, n, path)?;
    if space_group.is_empty() {
        return Err(malformed(
            path,
            format!("line {n}: no space group in columns 56-66 of the CRYST1 record"),
        ));
    }
    Ok((cell, n, space_group.to_string()))
}

/// Serial number and atom of an ATOM or HETATM record (`record` names it in
/// messages).
fn atom(line: &[u8], n: usize, record: &str, path: &Path) -> Result<(String, Atom)> {
    let serial = text(line, 7, 11, n, path)?.to_string();
    let name = text(line, 13, 16, n, path)?.to_string();
    // Where the name stands in its four columns tells the element, which the
    // trimmed name no longer shows.
    let mut name4 = [b' '; 4];
    for (d, s) in name4.iter_mut().zip(cols(line, 13, 16)) {
        *d = *s;
    }
    let x = number(line, (31, 38), "x coordinate", None, n, path)?;
    let y = number(line, (39, 46), "y coordinate", None, n, path)?;
    let z = number(line, (47, 54), "z coordinate", None, n, path)?;
    let occupancy = number(line, (55, 60), "occupancy", Some(1.0), n, path)?;
    let b_iso_a2 = number(line, (61, 66), "B factor", Some(0.0), n, path)?;
    let symbol = text(line, 77, 78, n, path)?;
    let element = if symbol.is_empty() {
        element_from_name(name4).ok_or_else(|| {
            malformed(
                path,
                format!(
                    "line {n}: columns 77-78 give no element and the atom name \"{}\" gives none",
                    shown(&name)
                ),
            )
        })?
    } else {
        Element::from_symbol(symbol).ok_or_else(|| {
            malformed(
                path,
                format!("line {n}: unknown element \"{}\" in {record} record", shown(symbol)),
            )
        })?
    };
    let charge_text = text(line, 79, 80, n, path)?;
    let charge = parse_charge(charge_text).ok_or_else(|| {
        malformed(
            path,
            format!(
                "line {n}: charge \"{}\" in columns 79-80 is not like 2+ or 1-",
                shown(charge_text)
            ),
        )
    })?;
    let atom = Atom {
        name,
        element,
        charge,
        xyz_a: [x, y, z],
        occupancy,
        b_iso_a2,
        u_aniso_a2: None,
        line: n,
    };
    Ok((serial, atom))
}

/// Serial number and U (Å²) of an ANISOU record, which writes U × 10⁴ as
/// integers.
fn anisou(line: &[u8], n: usize, path: &Path) -> Result<(String, [f64; 6])> {
    const FIELDS: [(usize, usize, &str); 6] = [
        (29, 35, "U11"),
        (36, 42, "U22"),
        (43, 49, "U33"),
        (50, 56, "U12"),
        (57, 63, "U13"),
        (64, 70, "U23"),
    ];
    let serial = text(line, 7, 11, n, path)?.to_string();
    let mut u = [0.0; 6];
    for (v, &(first, last, what)) in u.iter_mut().zip(FIELDS.iter()) {
        *v = number(line, (first, last), what, None, n, path)? / 1e4;
    }
    Ok((serial, u))
}

/// The element an atom name implies when columns 77–78 are blank, from the
/// PDB's rule of alignment: a one-letter element's name starts in column 14
/// (column 13 blank, or a digit as in `1HG1`), a two-letter element's in
/// column 13 (`FE1 `, `CA  ` is calcium while ` CA ` is carbon).
///
/// Two exceptions keep the rule from misreading common names: a name that
/// fills all four columns and starts with `H` or `D` is a hydrogen (`HG11`,
/// `HE21`; a mercury or helium atom's name is shorter), and a name starting
/// in column 13 whose first two letters are no element is read by its first
/// letter (`OXT `, `N1  ` from programs that left-justify every name).
/// `name4` is columns 13–16, blank-padded.
pub fn element_from_name(name4: [u8; 4]) -> Option<Element> {
    let [c13, c14, _, c16] = name4.map(|b| b.to_ascii_uppercase());
    let one_letter = |b: u8| {
        if b.is_ascii_alphabetic() {
            Element::from_symbol(std::str::from_utf8(&[b]).ok()?)
        } else {
            None
        }
    };
    if c13 == b' ' || c13.is_ascii_digit() {
        return one_letter(c14);
    }
    if !c13.is_ascii_alphabetic() {
        return None;
    }
    if (c13 == b'H' || c13 == b'D') && c16 != b' ' {
        return Some(Element::H);
    }
    if c14.is_ascii_alphabetic() {
        if let Some(e) = std::str::from_utf8(&[c13, c14]).ok().and_then(Element::from_symbol) {
            return Some(e);
        }
    }
    one_letter(c13)
}

/// A formal charge as columns 79–80 write it: `2+`, `1-`, also `+2`, `-1`, a
/// lone sign for one electron, `0`; blank is 0.
fn parse_charge(t: &str) -> Option<i8> {
    let b = t.as_bytes();
    let sign = |s: u8| match s {
        b'+' => Some(1i8),
        b'-' => Some(-1i8),
        _ => None,
    };
    let digit = |d: u8| d.is_ascii_digit().then(|| (d - b'0') as i8);
    match *b {
        [] => Some(0),
        [b'0'] => Some(0),
        [s] => sign(s),
        [d, s] if d.is_ascii_digit() => Some(digit(d)? * sign(s)?),
        [s, d] => Some(digit(d)? * sign(s)?),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ATOM record with every field in its columns; `name` is columns
    /// 13–16 as they stand, `element` and `charge` columns 77–78 and 79–80.
    fn atom_line(
        serial: u32,
        name: &str,
        xyz: [f64; 3],
        occ: f64,
        b: f64,
        element: &str,
    ) -> String {
        format!(
            "ATOM  {serial:>5} {name:<4} ALA A{seq:>4}    {x:>8.3}{y:>8.3}{z:>8.3}{occ:>6.2}{b:>6.2}          {element:<4}",
            seq = 1,
            x = xyz[0],
            y = xyz[1],
            z = xyz[2],
        )
    }

    const CRYST1: &str =
        "CRYST1   50.000   60.000   70.000  90.00  90.00 120.00 H 3                   ";

    fn parse(text: &str) -> Result<Model> {
        parse_pdb(text.as_bytes(), Path::new("x.pdb"))
    }

    fn error(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    fn name_element(name: &str) -> Option<&'static str> {
        let mut name4 = [b' '; 4];
        name4[..name.len()].copy_from_slice(name.as_bytes());
        element_from_name(name4).map(Element::symbol)
    }

    #[test]
    fn atom_line_has_the_columns_of_the_format() {
        let l = atom_line(7, " CA ", [1.0, -2.0, 30.5], 0.5, 12.0, " C1+");
        assert_eq!(l.len(), 80);
        assert_eq!(&l[12..16], " CA ");
        assert_eq!(&l[30..38], "   1.000");
        assert_eq!(&l[54..60], "  0.50");
        assert_eq!(&l[76..80], " C1+");
    }

    #[test]
    fn cryst1_and_atoms() {
        let text = format!(
            "HEADER    TEST\n{CRYST1}\n{}\n{}\nTER\nEND\n{}\n",
            atom_line(1, " CA ", [1.0, 2.0, 3.0], 0.5, 12.0, " C"),
            atom_line(2, " O  ", [-1.0, 0.0, 1e3], 1.0, 0.0, " O1-"),
            atom_line(3, " N  ", [0.0; 3], 1.0, 0.0, " N"),
        );
        let m = parse(&text).unwrap();
        assert_eq!(m.cell, [50.0, 60.0, 70.0, 90.0, 90.0, 120.0]);
        assert_eq!(m.space_group, "H 3");
        assert_eq!(m.hall, None);
        assert_eq!(m.atoms.len(), 2, "END stops the reading");
        let a = &m.atoms[0];
        assert_eq!(a.name, "CA");
        assert_eq!(a.element, Element::C);
        assert_eq!(a.xyz_a, [1.0, 2.0, 3.0]);
        assert_eq!((a.occupancy, a.b_iso_a2, a.charge, a.line), (0.5, 12.0, 0, 3));
        assert_eq!(a.u_aniso_a2, None);
        let o = &m.atoms[1];
        assert_eq!((o.element, o.charge, o.xyz_a[2], o.line), (Element::O, -1, 1000.0, 4));
    }

    #[test]
    fn element_from_columns_77_78() {
        for (cols, symbol) in [("FE", "Fe"), ("Fe", "Fe"), (" S", "S"), ("S ", "S"), (" D", "H")] {
            // The name says otherwise: the element columns win.
            let text = format!("{CRYST1}\n{}\n", atom_line(1, "CA  ", [0.0; 3], 1.0, 0.0, cols));
            assert_eq!(parse(&text).unwrap().atoms[0].element.symbol(), symbol, "{cols:?}");
        }
    }

    #[test]
    fn element_from_the_name() {
        assert_eq!(name_element(" CA "), Some("C"));
        assert_eq!(name_element("CA  "), Some("Ca"));
        assert_eq!(name_element("FE1 "), Some("Fe"));
        assert_eq!(name_element("FE  "), Some("Fe"));
        assert_eq!(name_element("ZN"), Some("Zn"));
        assert_eq!(name_element("Se  "), Some("Se"));
        assert_eq!(name_element(" N  "), Some("N"));
        assert_eq!(name_element(" OG1"), Some("O"));
        assert_eq!(name_element(" HB2"), Some("H"));
        assert_eq!(name_element("1HG1"), Some("H"));
        assert_eq!(name_element("2HB "), Some("H"));
        assert_eq!(name_element("HG11"), Some("H"));
        assert_eq!(name_element("HE21"), Some("H"));
        assert_eq!(name_element("HD21"), Some("H"));
        assert_eq!(name_element("DG11"), Some("H"));
        assert_eq!(name_element(" D  "), Some("H"));
        assert_eq!(name_element("HG  "), Some("Hg"));
        assert_eq!(name_element("HG1 "), Some("Hg"));
        assert_eq!(name_element("OXT "), Some("O"));
        assert_eq!(name_element("N1  "), Some("N"));
        assert_eq!(name_element("CL1 "), Some("Cl"));
        assert_eq!(name_element("C1' "), Some("C"));
        assert_eq!(name_element(" C1'"), Some("C"));
        assert_eq!(name_element(" X  "), None);
        assert_eq!(name_element("    "), None);
        assert_eq!(name_element("  C "), None);
        assert_eq!(name_element("*C  "), None);
        assert_eq!(name_element("1X  "), None);

        // Through the reader, with blank element columns.
        let text = format!(
            "{CRYST1}\n{}\n{}\n{}\n",
            atom_line(1, " CA ", [0.0; 3], 1.0, 0.0, ""),
            atom_line(2, "CA  ", [0.0; 3], 1.0, 0.0, ""),
            atom_line(3, "FE1", [0.0; 3], 1.0, 0.0, ""),
        );
        let m = parse(&text).unwrap();
        let symbols: Vec<_> = m.atoms.iter().map(|a| a.element.symbol()).collect();
        assert_eq!(symbols, ["C", "Ca", "Fe"]);
        assert_eq!(m.atoms[2].name, "FE1");
        // A record that stops before column 77 has no element columns either.
        let short = &atom_line(1, " OG1", [0.0; 3], 1.0, 0.0, "")[..66];
        assert_eq!(parse(&format!("{CRYST1}\n{short}\n")).unwrap().atoms[0].element, Element::O);
    }

    #[test]
    fn charges() {
        for (t, q) in [("", 0), ("2+", 2), ("1-", -1), ("+2", 2), ("-3", -3), ("+", 1), ("0", 0)] {
            assert_eq!(parse_charge(t), Some(q), "{t:?}");
        }
        for t in ["2", "++", "a+", "1+2", "+-"] {
            assert_eq!(parse_charge(t), None, "{t:?}");
        }
        let text = format!("{CRYST1}\n{}\n", atom_line(1, "ZN  ", [0.0; 3], 1.0, 0.0, "ZN2+"));
        assert_eq!(parse(&text).unwrap().atoms[0].charge, 2);
        let text = format!("{CRYST1}\n{}\n", atom_line(1, "ZN  ", [0.0; 3], 1.0, 0.0, "ZNx2"));
        let e = error(&text);
        assert!(e.contains("line 2: charge \"x2\" in columns 79-80"), "{e}");
    }

    #[test]
    fn anisou_is_scaled_and_matched_by_serial() {
        let text = format!(
            "{CRYST1}\n{}\n{}\n{}\n{}\n",
            atom_line(11, " N  ", [0.0; 3], 1.0, 10.0, " N"),
            atom_line(12, " CA ", [1.0; 3], 1.0, 10.0, " C"),
            "ANISOU   12  CA  ALA A   1     2406   1892   1614    198    519   -328       C",
            "ANISOU   11  N   ALA A   1     1000   2000   3000     -4      0      1       N",
        );
        let m = parse(&text).unwrap();
        assert_eq!(m.atoms[1].u_aniso_a2, Some([0.2406, 0.1892, 0.1614, 0.0198, 0.0519, -0.0328]));
        // Out of order, it is found by its serial all the same.
        assert_eq!(m.atoms[0].u_aniso_a2, Some([0.1, 0.2, 0.3, -0.0004, 0.0, 0.0001]));

        let text = format!(
            "{CRYST1}\n{}\n{}\n",
            atom_line(11, " N  ", [0.0; 3], 1.0, 10.0, " N"),
            "ANISOU   13  N   ALA A   1     1000   2000   3000      0      0      0       N",
        );
        let e = error(&text);
        assert!(e.contains("line 3: ANISOU serial 13 matches no ATOM record"), "{e}");

        let text = format!(
            "{CRYST1}\n{}\n{}\n",
            atom_line(11, " N  ", [0.0; 3], 1.0, 10.0, " N"),
            "ANISOU   11  N   ALA A   1     1000   2000   3000      0      0",
        );
        let e = error(&text);
        assert!(e.contains("line 3: no U23 in columns 64-70"), "{e}");
    }

    #[test]
    fn only_the_first_model_is_read() {
        let text = format!(
            "{CRYST1}\nMODEL        1\n{}\n{}\nENDMDL\nMODEL        2\n{}\n{}\nENDMDL\nEND\n",
            atom_line(1, " N  ", [1.0; 3], 1.0, 10.0, " N"),
            atom_line(2, " CA ", [2.0; 3], 1.0, 10.0, " C"),
            atom_line(1, " N  ", [3.0; 3], 1.0, 10.0, " N"),
            "ANISOU    1  N   ALA A   1     1000   2000   3000      0      0      0       N",
        );
        let m = parse(&text).unwrap();
        assert_eq!(m.atoms.len(), 2);
        assert_eq!(m.atoms[0].xyz_a, [1.0; 3]);
        assert_eq!(m.atoms[0].u_aniso_a2, None);

        // A second MODEL with no ENDMDL before it ends the first all the same.
        let text = format!(
            "{CRYST1}\nMODEL        1\n{}\nMODEL        2\n{}\n",
            atom_line(1, " N  ", [1.0; 3], 1.0, 10.0, " N"),
            atom_line(1, " N  ", [3.0; 3], 1.0, 10.0, " N"),
        );
        assert_eq!(parse(&text).unwrap().atoms.len(), 1);
    }

    #[test]
    fn blank_occupancy_and_b() {
        let full = atom_line(1, " N  ", [1.0; 3], 0.3, 10.0, " N");
        let m = parse(&format!("{CRYST1}\n{}\n", &full[..54])).unwrap();
        assert_eq!((m.atoms[0].occupancy, m.atoms[0].b_iso_a2), (1.0, 0.0));
        assert_eq!(m.atoms[0].element, Element::N);
        let e = error(&format!("{CRYST1}\n{}\n", &full[..46]));
        assert!(e.contains("line 2: no z coordinate in columns 47-54"), "{e}");
    }

    #[test]
    fn errors_name_the_line() {
        let ok = atom_line(1, " N  ", [1.0; 3], 1.0, 10.0, " N");
        let cases: Vec<(String, &str)> = vec![
            (
                format!("{CRYST1}\n{ok}\n{}\n", atom_line(2, " X  ", [0.0; 3], 1.0, 0.0, "XX")),
                "x.pdb: line 3: unknown element \"XX\" in ATOM record",
            ),
            (
                format!(
                    "{CRYST1}\n{}\n",
                    atom_line(2, " X  ", [0.0; 3], 1.0, 0.0, "Xx").replacen("ATOM  ", "HETATM", 1)
                ),
                "line 2: unknown element \"Xx\" in HETATM record",
            ),
            (
                format!("{CRYST1}\n{}\n", atom_line(2, " X  ", [0.0; 3], 1.0, 0.0, "")),
                "line 2: columns 77-78 give no element and the atom name \"X\" gives none",
            ),
            (format!("{ok}\n"), "no CRYST1 record: the model has no unit cell"),
            (format!("{}\n{ok}\n", &CRYST1[..54]), "line 1: no space group in columns 56-66"),
            (format!("{CRYST1}\n"), "no atoms"),
            (format!("{CRYST1}\nATOM\n"), "line 2: no x coordinate in columns 31-38"),
            (
                format!("\n\n{CRYST1}\n{}\n", atom_line(1, " N  ", [1.0; 3], 1.5, 10.0, " N")),
                "line 4: occupancy 1.5 outside [0, 1]",
            ),
            (
                format!("{CRYST1}\n{}\n", atom_line(1, " N  ", [1.0; 3], -0.1, 10.0, " N")),
                "line 2: occupancy -0.1 outside [0, 1]",
            ),
            (
                format!("{CRYST1}\n{}\n", atom_line(1, " N  ", [1.0; 3], 1.0, -3.0, " N")),
                "line 2: B factor -3 is negative",
            ),
            (
                format!(
                    "{CRYST1}\n{ok}\n{}\n",
                    atom_line(2, " N  ", [f64::NAN, 0.0, 0.0], 1.0, 10.0, " N")
                ),
                "line 3: coordinate is not a finite number",
            ),
            (
                format!("{CRYST1}\n{}\n", atom_line(1, " N  ", [1.0; 3], f64::NAN, 10.0, " N")),
                "line 2: occupancy is not a finite number",
            ),
            (
                format!("{CRYST1}\n{}\n", atom_line(1, " N  ", [1.0; 3], 1.0, f64::INFINITY, " N")),
                "line 2: B factor is not a finite number",
            ),
            (
                format!("{CRYST1}\n{}\n", ok.replacen("   1.000", "   1.0x0", 1)),
                "line 2: x coordinate \"1.0x0\" is not a number",
            ),
            (
                format!("{CRYST1}\n{ok}\n{}\n", "ANISOU    1  N   ALA A   1      nan   2000   3000      0      0      0       N"),
                "line 2: anisotropic U is not a finite number",
            ),
            (
                format!("{}\n{ok}\n", CRYST1.replacen("   50.000", "   -5.000", 1)),
                "line 1: cell lengths -5 60 70 must be > 0",
            ),
            (
                format!("{}\n{ok}\n", CRYST1.replacen("  90.00  90.00 120.00", "  90.00  10.00 120.00", 1)),
                "line 1: cell angles 90 10 120 make no cell",
            ),
            (
                format!("{}\n{ok}\n", CRYST1.replacen("   60.000", "   60.0é0", 1)),
                "line 1: columns 16-24 are not ASCII text",
            ),
        ];
        for (text, msg) in cases {
            let e = error(&text);
            assert!(e.contains(msg), "{e:?} does not say {msg:?}");
        }
    }

    #[test]
    fn line_endings_and_case() {
        let text = format!("{CRYST1}\r\n{}\r\n", atom_line(1, " N  ", [1.0; 3], 1.0, 10.0, " N"))
            .to_lowercase();
        let m = parse(&text).unwrap();
        assert_eq!(m.space_group, "h 3");
        assert_eq!(m.atoms[0].element, Element::N);
        assert_eq!(m.atoms[0].name, "n");
    }

    #[test]
    fn garbage_never_panics() {
        let text = format!(
            "{CRYST1}\nMODEL 1\n{}\n{}\nANISOU    2  CA  ALA A   1     2406   1892   1614    198    519   -328       C\nENDMDL\nEND\n",
            atom_line(1, " N  ", [1.0; 3], 1.0, 10.0, " N"),
            atom_line(2, " CA ", [1.0; 3], 1.0, 10.0, ""),
        );
        let bytes = text.as_bytes();
        for end in 0..=bytes.len() {
            let _ = parse_pdb(&bytes[..end], Path::new("t"));
        }
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..3000 {
            let mut b = bytes.to_vec();
            for _ in 0..1 + next() % 8 {
                let i = (next() % b.len() as u64) as usize;
                b[i] = (next() % 256) as u8;
            }
            let _ = parse_pdb(&b, Path::new("t"));
        }
    }
}
