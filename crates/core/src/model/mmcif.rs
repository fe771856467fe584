//! The mmCIF format: a CIF tokenizer, the first data block as items and
//! loops, and the categories of a model (`_cell`, `_symmetry` or
//! `_space_group`, `_atom_site`, `_atom_site_anisotrop`).

use super::{finish, malformed, parse_number, Atom, Element, Model};
use crate::error::{shown, Result};
use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::path::Path;

/// Parse the contents of an mmCIF file; `path` is only used in error
/// messages.
///
/// - Only the first data block is read, and of several models
///   (`_atom_site.pdbx_PDB_model_num`) only the one of the first row.
/// - The atom name is `auth_atom_id`, else `label_atom_id`; the element is
///   `type_symbol` (a charge written after it, as in `Fe2+`, is ignored: the
///   charge is `pdbx_formal_charge`).
/// - A missing (`?` or `.`) or absent occupancy reads as 1, B as 0 and the
///   charge as 0.
/// - `_atom_site_anisotrop` rows are matched to atoms by `id`; they give
///   `U[i][j]`, or `B[i][j]`, which is converted by U = B / (8π²). A row that
///   matches no atom of any model is an error.
/// - Numbers may carry a standard uncertainty in parentheses (`1.234(5)`),
///   which is dropped.
pub fn parse_mmcif(bytes: &[u8], path: &Path) -> Result<Model> {
    let text = String::from_utf8_lossy(bytes);
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let tokens = tokenize(text).map_err(|msg| malformed(path, msg))?;
    let block = Block::from_tokens(&tokens).map_err(|msg| malformed(path, msg))?;
    model_from_block(&block).map_err(|msg| malformed(path, msg)).and_then(
        |(cell, cell_line, space_group, hall, atoms)| {
            finish(cell, cell_line, space_group, hall, atoms, path)
        },
    )
}

/// What a CIF token is.
#[derive(Debug, Clone, PartialEq)]
enum Kind<'a> {
    /// `data_NAME`, with the name.
    Data(&'a str),
    /// `loop_`.
    Loop,
    /// `save_NAME` opening a save frame, or `save_` closing one (empty name).
    Save(&'a str),
    /// `global_` or `stop_`, which mmCIF never uses.
    Reserved(&'a str),
    /// A tag, `_category.item`, as written.
    Tag(&'a str),
    /// A value; `None` for the unquoted `.` (inapplicable) and `?` (unknown).
    Value(Option<Cow<'a, str>>),
}

/// A token and the 1-based line it starts on.
#[derive(Debug, Clone, PartialEq)]
struct Token<'a> {
    kind: Kind<'a>,
    line: usize,
}

/// Split CIF text into tokens. Errors are messages naming the line.
fn tokenize(text: &str) -> std::result::Result<Vec<Token<'_>>, String> {
    let b = text.as_bytes();
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            line += 1;
            i += 1;
            continue;
        }
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let at_line_start = i == 0 || b[i - 1] == b'\n';
        if c == b'#' {
            i = b[i..].iter().position(|&x| x == b'\n').map_or(b.len(), |k| i + k);
            continue;
        }
        if c == b';' && at_line_start {
            // The field runs to the next line that starts with ';'; the line
            // break before that ';' belongs to the delimiter, not the value.
            let start_line = line;
            let Some(k) = b[i..].windows(2).position(|w| w == b"\n;") else {
                return Err(format!("line {start_line}: text field opened here is never closed"));
            };
            let end = i + k;
            let raw = &text[i + 1..end];
            line += raw.bytes().filter(|&x| x == b'\n').count() + 1;
            let raw = raw.strip_suffix('\r').unwrap_or(raw);
            // Writers open a field with ';' alone on its line: that first
            // line break is layout, not part of the value.
            let raw = raw.strip_prefix("\r\n").or_else(|| raw.strip_prefix('\n')).unwrap_or(raw);
            let value =
                if raw.contains('\r') { Cow::Owned(raw.replace("\r\n", "\n")) } else { raw.into() };
            tokens.push(Token { kind: Kind::Value(Some(value)), line: start_line });
            i = end + 2;
            continue;
        }
        if c == b'\'' || c == b'"' {
            // A quote closes the string only when whitespace (or the end)
            // follows it, so 'O5'' is the value O5'.
            let mut k = i + 1;
            loop {
                match b.get(k) {
                    None | Some(b'\n') | Some(b'\r') => {
                        return Err(format!(
                            "line {line}: quoted string is not closed on its line"
                        ));
                    }
                    Some(&q) if q == c && b.get(k + 1).is_none_or(|x| x.is_ascii_whitespace()) => {
                        break
                    }
                    _ => k += 1,
                }
            }
            tokens.push(Token { kind: Kind::Value(Some(text[i + 1..k].into())), line });
            i = k + 1;
            continue;
        }
        let end = b[i..].iter().position(|x| x.is_ascii_whitespace()).map_or(b.len(), |k| i + k);
        let word = &text[i..end];
        let kind = classify(word);
        tokens.push(Token { kind, line });
        i = end;
    }
    Ok(tokens)
}

/// The kind of an unquoted token; reserved words are matched in any case.
fn classify(word: &str) -> Kind<'_> {
    let prefix = |p: &str| {
        word.len() >= p.len() && word.as_bytes()[..p.len()].eq_ignore_ascii_case(p.as_bytes())
    };
    if prefix("data_") {
        Kind::Data(&word[5..])
    } else if word.eq_ignore_ascii_case("loop_") {
        Kind::Loop
    } else if prefix("save_") {
        Kind::Save(&word[5..])
    } else if word.eq_ignore_ascii_case("global_") || word.eq_ignore_ascii_case("stop_") {
        Kind::Reserved(word)
    } else if word.starts_with('_') {
        Kind::Tag(word)
    } else if word == "." || word == "?" {
        Kind::Value(None)
    } else {
        Kind::Value(Some(word.into()))
    }
}

/// A value and the line it is on.
#[derive(Debug, Clone, PartialEq)]
struct Item<'a> {
    value: Option<Cow<'a, str>>,
    line: usize,
}

/// A loop: its tags (lower case) and its values, row after row.
#[derive(Debug)]
struct Loop<'a> {
    tags: Vec<String>,
    values: Vec<Item<'a>>,
}

/// A data block: its `_tag value` pairs (keys in lower case, as CIF tags are
/// matched regardless of case) and its loops.
#[derive(Debug, Default)]
struct Block<'a> {
    items: HashMap<String, Item<'a>>,
    loops: Vec<Loop<'a>>,
}

/// The category of a tag, up to its first `.` (`_atom_site`).
fn category(tag: &str) -> Option<&str> {
    tag.split_once('.').map(|(c, _)| c)
}

impl<'a> Block<'a> {
    /// The first data block of a token stream. Save frames are skipped.
    fn from_tokens(tokens: &[Token<'a>]) -> std::result::Result<Block<'a>, String> {
        let mut block = Block::default();
        let mut seen = HashSet::new();
        let mut duplicate = |tag: &str, line: usize| {
            if seen.insert(tag.to_ascii_lowercase()) {
                Ok(())
            } else {
                Err(format!("line {line}: tag {} appears twice", shown(tag)))
            }
        };
        let mut it = tokens.iter().peekable();
        match it.next() {
            Some(Token { kind: Kind::Data(_), .. }) => {}
            Some(t) => {
                return Err(format!("line {}: CIF text before the first data_ block", t.line))
            }
            None => return Err("no data_ block".to_string()),
        }
        while let Some(t) = it.next() {
            match &t.kind {
                Kind::Data(_) => break,
                Kind::Tag(tag) => {
                    let Some(Token { kind: Kind::Value(v), line }) = it.peek() else {
                        return Err(format!("line {}: tag {} has no value", t.line, shown(tag)));
                    };
                    duplicate(tag, t.line)?;
                    block
                        .items
                        .insert(tag.to_ascii_lowercase(), Item { value: v.clone(), line: *line });
                    it.next();
                }
                Kind::Loop => {
                    let mut tags = Vec::new();
                    while let Some(Token { kind: Kind::Tag(tag), line }) = it.peek() {
                        duplicate(tag, *line)?;
                        tags.push(tag.to_ascii_lowercase());
                        it.next();
                    }
                    if tags.is_empty() {
                        return Err(format!("line {}: loop_ with no tags", t.line));
                    }
                    let mut values = Vec::new();
                    while let Some(Token { kind: Kind::Value(v), line }) = it.peek() {
                        values.push(Item { value: v.clone(), line: *line });
                        it.next();
                    }
                    if values.len() % tags.len() != 0 {
                        return Err(format!(
                            "line {}: loop of {} has {} values, not a multiple of its {} tags",
                            t.line,
                            shown(&tags[0]),
                            values.len(),
                            tags.len()
                        ));
                    }
                    block.loops.push(Loop { tags, values });
                }
                Kind::Save(name) if !name.is_empty() => {
                    let closed = it.any(|t| t.kind == Kind::Save(""));
                    if !closed {
                        return Err(format!("line {}: save frame is never closed", t.line));
                    }
                }
                Kind::Save(_) => {
                    return Err(format!("line {}: save_ closes no save frame", t.line))
                }
                Kind::Reserved(word) => {
                    return Err(format!("line {}: reserved word {} in CIF", t.line, shown(word)))
                }
                Kind::Value(v) => {
                    let v = v.as_deref().unwrap_or("?");
                    return Err(format!("line {}: value \"{}\" has no tag", t.line, shown(v)));
                }
            }
        }
        Ok(block)
    }

    /// The value of a tag (lower case) given as a pair, or in the first row of
    /// a loop.
    fn get(&self, tag: &str) -> Option<&Item<'a>> {
        self.items.get(tag).or_else(|| {
            self.loops
                .iter()
                .find_map(|l| l.tags.iter().position(|t| t == tag).and_then(|c| l.values.get(c)))
        })
    }

    /// The rows of a category (lower case), from its loop or, for a category
    /// of one row written as pairs, from those.
    fn table(&self, cat: &str) -> Option<Table<'_, 'a>> {
        if let Some(l) = self.loops.iter().find(|l| category(&l.tags[0]) == Some(cat)) {
            return Some(Table { tags: l.tags.clone(), values: Cow::Borrowed(&l.values) });
        }
        let mut pairs: Vec<_> =
            self.items.iter().filter(|(tag, _)| category(tag) == Some(cat)).collect();
        if pairs.is_empty() {
            return None;
        }
        pairs.sort_by_key(|(_, item)| item.line);
        Some(Table {
            tags: pairs.iter().map(|(tag, _)| tag.to_string()).collect(),
            values: Cow::Owned(pairs.iter().map(|(_, item)| (*item).clone()).collect()),
        })
    }
}

/// The rows of one category.
struct Table<'b, 'a> {
    tags: Vec<String>,
    values: Cow<'b, [Item<'a>]>,
}

impl<'a> Table<'_, 'a> {
    /// Column of a tag (lower case).
    fn column(&self, tag: &str) -> Option<usize> {
        self.tags.iter().position(|t| t == tag)
    }

    /// The rows.
    fn rows(&self) -> impl Iterator<Item = &[Item<'a>]> {
        self.values.chunks(self.tags.len().max(1))
    }
}

/// What a data block says of a model: cell, the line of the cell, space
/// group, Hall symbol and atoms, unchecked.
type Parts = ([f64; 6], usize, String, Option<String>, Vec<Atom>);

/// A number at a value, `what` naming it in messages: `Ok(None)` when the
/// value is missing.
fn number(item: &Item, what: &str) -> std::result::Result<Option<f64>, String> {
    match item.value.as_deref() {
        None => Ok(None),
        Some(t) => parse_number(t)
            .map(Some)
            .ok_or_else(|| format!("line {}: {what} \"{}\" is not a number", item.line, shown(t))),
    }
}

/// Read the model items of a data block.
fn model_from_block(block: &Block) -> std::result::Result<Parts, String> {
    const CELL: [&str; 6] = [
        "_cell.length_a",
        "_cell.length_b",
        "_cell.length_c",
        "_cell.angle_alpha",
        "_cell.angle_beta",
        "_cell.angle_gamma",
    ];
    let mut cell = [0.0; 6];
    let mut cell_line = 0;
    for (v, tag) in cell.iter_mut().zip(CELL) {
        let Some(item) = block.get(tag) else {
            return Err(format!("no {tag}: the model has no unit cell"));
        };
        *v = number(item, tag)?.ok_or_else(|| {
            format!("line {}: {tag} has no value: the model has no unit cell", item.line)
        })?;
        if cell_line == 0 {
            cell_line = item.line;
        }
    }

    let text_of = |tags: &[&str]| {
        tags.iter().find_map(|t| {
            let v = block.get(t)?.value.as_deref()?.trim();
            (!v.is_empty()).then(|| v.to_string())
        })
    };
    let space_group = text_of(&["_symmetry.space_group_name_h-m", "_space_group.name_h-m_alt"])
        .ok_or_else(|| {
            "no space group (_symmetry.space_group_name_H-M or _space_group.name_H-M_alt)"
                .to_string()
        })?;
    let hall = text_of(&["_symmetry.space_group_name_hall", "_space_group.name_hall"]);

    let (mut atoms, ids, other_models) = atom_site(block)?;
    anisotrop(block, &mut atoms, &ids, &other_models)?;
    Ok((cell, cell_line, space_group, hall, atoms))
}

/// The atoms of the first model, the index of each by `id`, and the ids of
/// the atoms of later models.
#[allow(clippy::type_complexity)]
fn atom_site(
    block: &Block,
) -> std::result::Result<(Vec<Atom>, HashMap<String, usize>, HashSet<String>), String> {
    let mut atoms = Vec::new();
    let mut ids = HashMap::new();
    let mut other_models = HashSet::new();
    let Some(table) = block.table("_atom_site") else {
        return Ok((atoms, ids, other_models));
    };
    let col = |t: &str| table.column(&format!("_atom_site.{t}"));
    let xyz_cols = [col("cartn_x"), col("cartn_y"), col("cartn_z")];
    let (id_col, type_col, model_col) = (col("id"), col("type_symbol"), col("pdbx_pdb_model_num"));
    let name_cols = [col("auth_atom_id"), col("label_atom_id")];
    let (occ_col, b_col, charge_col) =
        (col("occupancy"), col("b_iso_or_equiv"), col("pdbx_formal_charge"));
    let mut first_model: Option<Option<String>> = None;

    for row in table.rows() {
        let line = row[0].line;
        let text = |c: Option<usize>| c.and_then(|c| row[c].value.as_deref());
        let id = text(id_col).map(str::to_string);
        let model = text(model_col).map(str::to_string);
        if *first_model.get_or_insert_with(|| model.clone()) != model {
            other_models.extend(id);
            continue;
        }

        let mut xyz = [0.0; 3];
        for ((v, c), axis) in xyz.iter_mut().zip(xyz_cols).zip(["x", "y", "z"]) {
            let what = format!("_atom_site.Cartn_{axis}");
            let Some(c) = c else {
                return Err(format!("line {line}: no {what} in _atom_site"));
            };
            *v = number(&row[c], &what)?
                .ok_or_else(|| format!("line {}: {what} has no value", row[c].line))?;
        }

        let symbol = text(type_col).ok_or_else(|| {
            format!("line {line}: _atom_site.type_symbol is missing: the atom has no element")
        })?;
        // Small-molecule habit: an ion's charge written after its symbol.
        let bare = symbol.trim_end_matches(|c: char| c.is_ascii_digit() || c == '+' || c == '-');
        let element = Element::from_symbol(bare).ok_or_else(|| {
            format!("line {line}: unknown element \"{}\" in _atom_site", shown(symbol))
        })?;

        let name = name_cols.iter().find_map(|&c| text(c)).unwrap_or("").trim().to_string();
        let occupancy = match occ_col {
            Some(c) => number(&row[c], "_atom_site.occupancy")?.unwrap_or(1.0),
            None => 1.0,
        };
        let b_iso_a2 = match b_col {
            Some(c) => number(&row[c], "_atom_site.B_iso_or_equiv")?.unwrap_or(0.0),
            None => 0.0,
        };
        let charge = match text(charge_col) {
            None => 0,
            Some(t) => t.trim().parse::<i8>().map_err(|_| {
                format!(
                    "line {line}: _atom_site.pdbx_formal_charge \"{}\" is not a small integer",
                    shown(t)
                )
            })?,
        };
        if let Some(id) = id {
            ids.insert(id, atoms.len());
        }
        atoms.push(Atom {
            name,
            element,
            charge,
            xyz_a: xyz,
            occupancy,
            b_iso_a2,
            u_aniso_a2: None,
            line,
        });
    }
    Ok((atoms, ids, other_models))
}

/// Give the atoms their U from `_atom_site_anisotrop`.
fn anisotrop(
    block: &Block,
    atoms: &mut [Atom],
    ids: &HashMap<String, usize>,
    other_models: &HashSet<String>,
) -> std::result::Result<(), String> {
    const IJ: [&str; 6] = ["[1][1]", "[2][2]", "[3][3]", "[1][2]", "[1][3]", "[2][3]"];
    let Some(table) = block.table("_atom_site_anisotrop") else {
        return Ok(());
    };
    let col = |t: &str| table.column(&format!("_atom_site_anisotrop.{t}"));
    let Some(id_col) = col("id") else {
        let line = table.values.first().map_or(0, |i| i.line);
        return Err(format!("line {line}: _atom_site_anisotrop has no id"));
    };
    let u_cols = IJ.map(|ij| col(&format!("u{ij}")));
    let b_cols = IJ.map(|ij| col(&format!("b{ij}")));
    let b_to_u = 1.0 / (8.0 * std::f64::consts::PI * std::f64::consts::PI);

    for row in table.rows() {
        let line = row[0].line;
        let id = row[id_col].value.as_deref().unwrap_or("?");
        let Some(&index) = ids.get(id) else {
            if other_models.contains(id) {
                continue;
            }
            return Err(format!(
                "line {line}: _atom_site_anisotrop id {} matches no atom in _atom_site",
                shown(id)
            ));
        };
        // U when all six are there, else B converted.
        let six = |cols: &[Option<usize>; 6], letter: &str, scale: f64| {
            let mut out = [0.0; 6];
            for ((v, c), ij) in out.iter_mut().zip(cols).zip(IJ) {
                let Some(c) = c else { return Ok(None) };
                match number(&row[*c], &format!("_atom_site_anisotrop.{letter}{ij}"))? {
                    Some(x) => *v = x * scale,
                    None => return Ok(None),
                }
            }
            Ok::<_, String>(Some(out))
        };
        let u = match six(&u_cols, "U", 1.0)? {
            Some(u) => u,
            None => six(&b_cols, "B", b_to_u)?.ok_or_else(|| {
                format!(
                    "line {line}: _atom_site_anisotrop gives neither all U[i][j] nor all B[i][j]"
                )
            })?,
        };
        atoms[index].u_aniso_a2 = Some(u);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(text: &str) -> Vec<Kind<'_>> {
        tokenize(text).unwrap().into_iter().map(|t| t.kind).collect()
    }

    fn v(s: &str) -> Kind<'_> {
        Kind::Value(Some(s.into()))
    }

    fn parse(text: &str) -> Result<Model> {
        parse_mmcif(text.as_bytes(), Path::new("x.cif"))
    }

    fn error(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    const HEAD: &str = "data_t
_cell.length_a 10
_cell.length_b 20
_cell.length_c 30
_cell.angle_alpha 90
_cell.angle_beta 90
_cell.angle_gamma 90
_space_group.name_H-M_alt 'P 21 21 21'
_space_group.name_Hall ' P 2ac 2ab'
";

    #[test]
    fn tokens() {
        assert_eq!(
            kinds("data_x _a.b 1 loop_ _c.d _c.e . ? '?' x#y # comment\n'O5'' \"a\"b\" 'it's'"),
            vec![
                Kind::Data("x"),
                Kind::Tag("_a.b"),
                v("1"),
                Kind::Loop,
                Kind::Tag("_c.d"),
                Kind::Tag("_c.e"),
                Kind::Value(None),
                Kind::Value(None),
                v("?"),
                v("x#y"),
                v("O5'"),
                v("a\"b"),
                v("it's"),
            ]
        );
        assert_eq!(
            kinds("DATA_X LOOP_ Save_f save_ global_"),
            vec![
                Kind::Data("X"),
                Kind::Loop,
                Kind::Save("f"),
                Kind::Save(""),
                Kind::Reserved("global_"),
            ]
        );
        assert_eq!(kinds("'' 'a'\t\"\""), vec![v(""), v("a"), v("")]);
        assert_eq!(kinds("a;b ;c"), vec![v("a;b"), v(";c")]);
        let e = tokenize("data_x\n_a 'abc\n'").unwrap_err();
        assert_eq!(e, "line 2: quoted string is not closed on its line");
        let e = tokenize("data_x\n_a 'abc'd").unwrap_err();
        assert_eq!(e, "line 2: quoted string is not closed on its line");
    }

    #[test]
    fn text_fields() {
        let text = "data_x\n_a\n;first line\n  second 'line\n;\n_b 2\n;\r\nwindows\r\n;\n_c ;x\n";
        let t = tokenize(text).unwrap();
        assert_eq!(t[2], Token { kind: v("first line\n  second 'line"), line: 3 });
        assert_eq!(t[3], Token { kind: Kind::Tag("_b"), line: 6 });
        assert_eq!(t[5], Token { kind: v("windows"), line: 7 });
        assert_eq!(t[6], Token { kind: Kind::Tag("_c"), line: 10 });
        assert_eq!(t[7], Token { kind: v(";x"), line: 10 });
        assert_eq!(kinds(";\n;"), vec![v("")]);
        let e = tokenize("data_x\n_a\n;never\nclosed ;\n").unwrap_err();
        assert_eq!(e, "line 3: text field opened here is never closed");
    }

    #[test]
    fn blocks_loops_and_pairs() {
        let text = "# head\ndata_one\n_x.a 1\nloop_\n_y.a\n_y.b\n_y.c\n1 2\n3\n4 5\n6\n\
                    ;\ntext\n;\n8 9\ndata_two\n_x.b 2\n";
        let tokens = tokenize(text).unwrap();
        let b = Block::from_tokens(&tokens).unwrap();
        assert_eq!(b.get("_x.a").unwrap().value.as_deref(), Some("1"));
        assert!(b.get("_x.b").is_none(), "the second block is not read");
        let t = b.table("_y").unwrap();
        let rows: Vec<Vec<Option<&str>>> =
            t.rows().map(|r| r.iter().map(|i| i.value.as_deref()).collect()).collect();
        assert_eq!(
            rows,
            vec![
                vec![Some("1"), Some("2"), Some("3")],
                vec![Some("4"), Some("5"), Some("6")],
                vec![Some("text"), Some("8"), Some("9")]
            ]
        );
        assert_eq!(t.values[6].line, 12);
        assert_eq!(t.column("_y.c"), Some(2));
        assert_eq!(b.get("_y.b").unwrap().value.as_deref(), Some("2"));
        let t = b.table("_x").unwrap();
        assert_eq!(t.rows().count(), 1);

        let bad = |text: &str| Block::from_tokens(&tokenize(text).unwrap()).unwrap_err();
        assert_eq!(bad("data_x\n_a.b\n_a.c 1"), "line 2: tag _a.b has no value");
        assert_eq!(bad("data_x\n_a.b"), "line 2: tag _a.b has no value");
        assert_eq!(bad("data_x\n_a.b 1\n_A.B 2"), "line 3: tag _A.B appears twice");
        assert_eq!(bad("data_x\nloop_\n_a.b\n_a.b\n1 2"), "line 4: tag _a.b appears twice");
        assert_eq!(
            bad("data_x\nloop_\n_a.b\n_a.c\n1 2\n3"),
            "line 2: loop of _a.b has 3 values, not a multiple of its 2 tags"
        );
        assert_eq!(bad("data_x\nloop_\n1"), "line 2: loop_ with no tags");
        assert_eq!(bad("data_x\n_a.b 1 2"), "line 2: value \"2\" has no tag");
        assert_eq!(bad("_a.b 1\ndata_x"), "line 1: CIF text before the first data_ block");
        assert_eq!(bad("# only\n"), "no data_ block");
        assert_eq!(bad("data_x\nstop_"), "line 2: reserved word stop_ in CIF");
        assert_eq!(bad("data_x\nsave_f\n_a 1\n"), "line 2: save frame is never closed");
        assert_eq!(bad("data_x\nsave_\n"), "line 2: save_ closes no save frame");
        let b = Block::from_tokens(&tokenize("data_x save_f _a 1 save_ _b 2").unwrap()).unwrap();
        assert!(b.get("_a").is_none() && b.get("_b").is_some());
    }

    #[test]
    fn atoms_and_anisotropy() {
        let text = format!(
            "{HEAD}loop_
_atom_site.group_PDB
_atom_site.id
_atom_site.type_symbol
_atom_site.label_atom_id
_atom_site.auth_atom_id
_atom_site.label_alt_id
_atom_site.Cartn_x
_atom_site.Cartn_y
_atom_site.Cartn_z
_atom_site.occupancy
_atom_site.B_iso_or_equiv
_atom_site.pdbx_formal_charge
_atom_site.pdbx_PDB_model_num
ATOM 1 C \"C1'\" \"C1'\" A 1.5(2) -2.25 3
  0.6 10.5(12) ? 1
ATOM 2 C \"C1'\" \"C1'\" B 1.6 -2.35 3.1 0.4 11 . 1
HETATM 3 FE FE FE . 0 0 0 1 20 +2 1
HETATM 4 Fe2+ FE2 ? . 1 1 1 . . -1 1
ATOM 1000 C \"C1'\" \"C1'\" A 9 9 9 1 10 ? 2
loop_
_atom_site_anisotrop.id
_atom_site_anisotrop.type_symbol
_atom_site_anisotrop.B[1][1]
_atom_site_anisotrop.B[2][2]
_atom_site_anisotrop.B[3][3]
_atom_site_anisotrop.B[1][2]
_atom_site_anisotrop.B[1][3]
_atom_site_anisotrop.B[2][3]
3 FE 78.956835 0 0 0 0 -7.8956835
1000 C 1 1 1 0 0 0
"
        );
        let m = parse(&text).unwrap();
        assert_eq!(m.cell, [10.0, 20.0, 30.0, 90.0, 90.0, 90.0]);
        assert_eq!(m.space_group, "P 21 21 21");
        assert_eq!(m.hall.as_deref(), Some("P 2ac 2ab"));
        assert_eq!(m.atoms.len(), 4, "the atom of model 2 is left out");
        let a = &m.atoms[0];
        assert_eq!((a.name.as_str(), a.element, a.charge), ("C1'", Element::C, 0));
        assert_eq!((a.xyz_a, a.occupancy, a.b_iso_a2, a.line), ([1.5, -2.25, 3.0], 0.6, 10.5, 24));
        assert_eq!((m.atoms[1].occupancy, m.atoms[1].line), (0.4, 26));
        let fe = &m.atoms[2];
        assert_eq!((fe.element.symbol(), fe.charge, fe.name.as_str()), ("Fe", 2, "FE"));
        let u = fe.u_aniso_a2.unwrap();
        let want = [1.0, 0.0, 0.0, 0.0, 0.0, -0.1];
        for (x, w) in u.iter().zip(want) {
            assert!((x - w).abs() < 1e-8, "{u:?}");
        }
        let ion = &m.atoms[3];
        // auth_atom_id is missing, so label_atom_id names it; blanks default.
        assert_eq!((ion.name.as_str(), ion.element.symbol(), ion.charge), ("FE2", "Fe", -1));
        assert_eq!((ion.occupancy, ion.b_iso_a2, ion.u_aniso_a2), (1.0, 0.0, None));
    }

    #[test]
    fn one_atom_written_as_pairs() {
        let text = format!(
            "{HEAD}_atom_site.id 1\n_atom_site.type_symbol S\n_atom_site.Cartn_x 1\n\
             _atom_site.Cartn_y 2\n_atom_site.Cartn_z 3\n\
             loop_\n_atom_site_anisotrop.id\n_atom_site_anisotrop.U[1][1]\n\
             _atom_site_anisotrop.U[2][2]\n_atom_site_anisotrop.U[3][3]\n\
             _atom_site_anisotrop.U[1][2]\n_atom_site_anisotrop.U[1][3]\n\
             _atom_site_anisotrop.U[2][3]\n1 0.1 0.2 0.3 0.01 0.02 0.03\n"
        );
        let m = parse(&text).unwrap();
        assert_eq!(m.atoms.len(), 1);
        let a = &m.atoms[0];
        assert_eq!((a.element.symbol(), a.xyz_a, a.line), ("S", [1.0, 2.0, 3.0], 10));
        assert_eq!((a.name.as_str(), a.occupancy), ("", 1.0));
        assert_eq!(a.u_aniso_a2, Some([0.1, 0.2, 0.3, 0.01, 0.02, 0.03]));
    }

    #[test]
    fn symmetry_category_and_missing_hall() {
        let text = "data_t\nloop_\n_cell.length_a\n_cell.length_b\n_cell.length_c\n\
                    _cell.angle_alpha\n_cell.angle_beta\n_cell.angle_gamma\n\
                    10.0(1) 10 12 90 90 120\n_symmetry.space_group_name_H-M 'H 3'\n\
                    _space_group.name_H-M_alt 'R 3'\n\
                    loop_\n_atom_site.type_symbol\n_atom_site.Cartn_x\n_atom_site.Cartn_y\n\
                    _atom_site.Cartn_z\nO 0 0 0\n";
        let m = parse(text).unwrap();
        assert_eq!(m.cell, [10.0, 10.0, 12.0, 90.0, 90.0, 120.0]);
        assert_eq!(m.space_group, "H 3");
        assert_eq!(m.hall, None);
        assert_eq!(m.atoms[0].element, Element::O);
    }

    #[test]
    fn errors_name_the_line() {
        let site = "loop_\n_atom_site.id\n_atom_site.type_symbol\n_atom_site.Cartn_x\n\
                    _atom_site.Cartn_y\n_atom_site.Cartn_z\n_atom_site.occupancy\n\
                    _atom_site.B_iso_or_equiv\n_atom_site.pdbx_formal_charge\n";
        // HEAD is 9 lines and `site` 9, so the first row is on line 19.
        let with_row = |row: &str| format!("{HEAD}{site}1 C 0 0 0 1 10 0\n{row}\n");
        let cases = [
            (with_row("2 Xx 0 0 0 1 10 0"), "x.cif: line 20: unknown element \"Xx\" in _atom_site"),
            (with_row("2 ? 0 0 0 1 10 0"), "line 20: _atom_site.type_symbol is missing"),
            (with_row("2 C 0 0 0 1.5 10 0"), "line 20: occupancy 1.5 outside [0, 1]"),
            (with_row("2 C 0 0 0 1 -1 0"), "line 20: B factor -1 is negative"),
            (with_row("2 C 0 nan 0 1 10 0"), "line 20: coordinate is not a finite number"),
            (with_row("2 C 0 0 inf 1 10 0"), "line 20: coordinate is not a finite number"),
            (with_row("2 C 0 0 x 1 10 0"), "line 20: _atom_site.Cartn_z \"x\" is not a number"),
            (with_row("2 C 0 0 ? 1 10 0"), "line 20: _atom_site.Cartn_z has no value"),
            (with_row("2 C 0 0 0 1 10 1.5"), "line 20: _atom_site.pdbx_formal_charge \"1.5\""),
            (with_row("2 C 0 0 0 1 10(x) 0"), "line 20: _atom_site.B_iso_or_equiv \"10(x)\""),
            (
                with_row("\n2 C 0 0 0 1 10 0\n3 C 0 0 0 1 10"),
                "line 10: loop of _atom_site.id has 23 values, not a multiple of its 8 tags",
            ),
            (HEAD.to_string(), "no atoms"),
            (HEAD.replace("_cell.length_b 20\n", ""), "no _cell.length_b: the model has no unit cell"),
            (
                HEAD.replace("_cell.length_b 20", "_cell.length_b ?"),
                "line 3: _cell.length_b has no value: the model has no unit cell",
            ),
            (format!("{}{site}1 C 0 0 0 1 10 0", HEAD.replace("_cell.length_c 30", "_cell.length_c 0")), "line 2: cell lengths 10 20 0 must be > 0"),
            (format!("{}{site}1 C 0 0 0 1 10 0", HEAD.replace("_cell.angle_beta 90\n_cell.angle_gamma 90", "_cell.angle_beta 30\n_cell.angle_gamma 30")), "line 2: cell angles 90 30 30 make no cell"),
            (HEAD.replace("_space_group.name_H-M_alt 'P 21 21 21'", "_space_group.name_H-M_alt ?"), "no space group"),
            (
                format!("{}\nloop_\n_atom_site_anisotrop.id\n_atom_site_anisotrop.U[1][1]\n7 0.1\n", with_row("")),
                "line 25: _atom_site_anisotrop id 7 matches no atom in _atom_site",
            ),
            (
                format!("{}\nloop_\n_atom_site_anisotrop.id\n_atom_site_anisotrop.U[1][1]\n1 0.1\n", with_row("")),
                "line 25: _atom_site_anisotrop gives neither all U[i][j] nor all B[i][j]",
            ),
            (
                format!("{}\nloop_\n_atom_site_anisotrop.id\n_atom_site_anisotrop.U[1][1]\n_atom_site_anisotrop.U[2][2]\n_atom_site_anisotrop.U[3][3]\n_atom_site_anisotrop.U[1][2]\n_atom_site_anisotrop.U[1][3]\n_atom_site_anisotrop.U[2][3]\n1 0.1 0.1 NaN 0 0 0\n", with_row("")),
                "line 19: anisotropic U is not a finite number",
            ),
            (format!("{HEAD}_x.y 'open\n"), "line 10: quoted string is not closed on its line"),
        ];
        for (text, msg) in cases {
            let e = error(&text);
            assert!(e.contains(msg), "{e:?} does not say {msg:?}");
        }
    }

    #[test]
    fn garbage_never_panics() {
        let text = format!(
            "{HEAD}loop_\n_atom_site.id\n_atom_site.type_symbol\n_atom_site.label_atom_id\n\
             _atom_site.Cartn_x\n_atom_site.Cartn_y\n_atom_site.Cartn_z\n\
             _atom_site.pdbx_PDB_model_num\n\
             1 O \"O5'\" 1.0(2) 2 3 1\n2 C\n;\nC1\n;\n 4 5 6 1\n3 C 'C''' 1 1 1 2\n\
             loop_\n_atom_site_anisotrop.id\n_atom_site_anisotrop.U[1][1]\n\
             _atom_site_anisotrop.U[2][2]\n_atom_site_anisotrop.U[3][3]\n\
             _atom_site_anisotrop.U[1][2]\n_atom_site_anisotrop.U[1][3]\n\
             _atom_site_anisotrop.U[2][3]\n1 0.1 0.2 0.3 0 0 0\n3 0.1 0.2 0.3 0 0 0\n"
        );
        let m = parse(&text).unwrap();
        assert_eq!(m.atoms.len(), 2);
        assert_eq!(m.atoms[1].name, "C1");
        assert!(m.atoms[0].u_aniso_a2.is_some());
        let bytes = text.as_bytes();
        for end in 0..=bytes.len() {
            let _ = parse_mmcif(&bytes[..end], Path::new("t"));
        }
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let specials = b";'\"#_ \n\r.?()";
        for _ in 0..3000 {
            let mut b = bytes.to_vec();
            for _ in 0..1 + next() % 8 {
                let i = (next() % b.len() as u64) as usize;
                b[i] = if next() % 2 == 0 {
                    specials[(next() % specials.len() as u64) as usize]
                } else {
                    (next() % 256) as u8
                };
            }
            let _ = parse_mmcif(&b, Path::new("t"));
        }
    }
}
