//! TSDL, the metadata language of CTF 1.8 (https://diamon.org/ctf/v1.8.3/): a lexer and a
//! recursive-descent parser into an untyped syntax tree. Only the declarations tracers actually
//! write are understood (LTTng-UST and LTTng-modules, barectf): integer / floating_point /
//! string / enum / struct / variant types, arrays and sequences, typealias / typedef, and the
//! trace / env / clock / stream / event / callsite blocks. Anything else is an error with its
//! line, never a panic.

use std::collections::HashMap;

use crate::Error;

/// Nesting bound: metadata nests a few levels; a hostile file must not exhaust the stack.
const MAX_DEPTH: usize = 64;

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Int(i128),
    Str(String),
    Punct(&'static str),
}

struct Lexer<'a> {
    src: &'a [u8],
    pos: usize,
    line: usize,
}

const PUNCTS: [&str; 15] = [":=", "...", "{", "}", "(", ")", "[", "]", ";", ":", "=", ",", "<", ">", "."];

impl<'a> Lexer<'a> {
    fn tokens(src: &'a str) -> Result<Vec<(Tok, usize)>, Error> {
        let mut lx = Lexer { src: src.as_bytes(), pos: 0, line: 1 };
        let mut out = Vec::new();
        while let Some(t) = lx.next()? {
            out.push((t, lx.line));
        }
        Ok(out)
    }

    fn err(&self, msg: impl Into<String>) -> Error {
        Error::Metadata { line: self.line, msg: msg.into() }
    }

    fn next(&mut self) -> Result<Option<Tok>, Error> {
        loop {
            let Some(&c) = self.src.get(self.pos) else { return Ok(None) };
            if c == b'\n' {
                self.line += 1;
                self.pos += 1;
            } else if c.is_ascii_whitespace() {
                self.pos += 1;
            } else if self.src[self.pos..].starts_with(b"/*") {
                let rest = &self.src[self.pos + 2..];
                let end = rest.windows(2).position(|w| w == b"*/").ok_or_else(|| self.err("unterminated comment"))?;
                self.line += rest[..end].iter().filter(|&&b| b == b'\n').count();
                self.pos += 2 + end + 2;
            } else if self.src[self.pos..].starts_with(b"//") {
                while self.pos < self.src.len() && self.src[self.pos] != b'\n' {
                    self.pos += 1;
                }
            } else {
                break;
            }
        }
        let c = self.src[self.pos];
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = self.pos;
            while self.pos < self.src.len() && (self.src[self.pos].is_ascii_alphanumeric() || self.src[self.pos] == b'_') {
                self.pos += 1;
            }
            return Ok(Some(Tok::Ident(String::from_utf8_lossy(&self.src[start..self.pos]).into_owned())));
        }
        if c.is_ascii_digit() || (c == b'-' && self.src.get(self.pos + 1).is_some_and(u8::is_ascii_digit)) {
            return self.number().map(Some);
        }
        if c == b'"' {
            return self.string().map(Some);
        }
        for p in PUNCTS {
            if self.src[self.pos..].starts_with(p.as_bytes()) {
                self.pos += p.len();
                return Ok(Some(Tok::Punct(p)));
            }
        }
        Err(self.err(format!("unexpected character {:?}", c as char)))
    }

    fn number(&mut self) -> Result<Tok, Error> {
        let neg = self.src[self.pos] == b'-';
        if neg {
            self.pos += 1;
        }
        let start = self.pos;
        while self.pos < self.src.len() && self.src[self.pos].is_ascii_alphanumeric() {
            self.pos += 1;
        }
        let text = std::str::from_utf8(&self.src[start..self.pos]).unwrap_or("");
        // C integer suffixes (U, L, UL, ULL) carry no meaning here.
        let text = text.trim_end_matches(['u', 'U', 'l', 'L']);
        let parsed = if let Some(hex) = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
            i128::from_str_radix(hex, 16)
        } else if text.len() > 1 && text.starts_with('0') {
            i128::from_str_radix(&text[1..], 8)
        } else {
            text.parse::<i128>()
        };
        let v = parsed.map_err(|_| self.err(format!("bad integer literal `{text}`")))?;
        Ok(Tok::Int(if neg { -v } else { v }))
    }

    fn string(&mut self) -> Result<Tok, Error> {
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            let Some(&c) = self.src.get(self.pos) else { return Err(self.err("unterminated string")) };
            self.pos += 1;
            match c {
                b'"' => break,
                b'\\' => {
                    let Some(&e) = self.src.get(self.pos) else { return Err(self.err("unterminated string")) };
                    self.pos += 1;
                    out.push(match e {
                        b'n' => b'\n',
                        b't' => b'\t',
                        b'r' => b'\r',
                        b'0' => 0,
                        other => other,
                    });
                }
                b'\n' => {
                    self.line += 1;
                    out.push(c);
                }
                _ => out.push(c),
            }
        }
        Ok(Tok::Str(String::from_utf8_lossy(&out).into_owned()))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteOrder {
    Native,
    Little,
    Big,
}

/// An attribute value: `8`, `"text"`, `le`, `clock.monotonic.value`.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Int(i128),
    Str(String),
    Path(String),
}

impl AttrValue {
    pub fn as_int(&self) -> Option<i128> {
        match self {
            AttrValue::Int(v) => Some(*v),
            AttrValue::Path(p) if p == "true" || p == "TRUE" => Some(1),
            AttrValue::Path(p) if p == "false" || p == "FALSE" => Some(0),
            _ => None,
        }
    }
    pub fn text(&self) -> String {
        match self {
            AttrValue::Int(v) => v.to_string(),
            AttrValue::Str(s) | AttrValue::Path(s) => s.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct IntType {
    pub size: u32,
    pub align: u32,
    pub signed: bool,
    pub byte_order: ByteOrder,
    pub text: bool,
    /// `map = clock.NAME.value`: the clock this field updates.
    pub clock: Option<String>,
}

#[derive(Clone, Debug)]
pub struct Mapping {
    pub label: String,
    pub lo: i128,
    pub hi: i128,
}

#[derive(Clone, Debug)]
pub enum Type {
    Int(IntType),
    Float { exp: u32, align: u32, byte_order: ByteOrder },
    Str,
    Enum { int: IntType, mappings: Vec<Mapping> },
    Struct { fields: Vec<(String, Type)>, align: u32 },
    Variant { tag: Option<String>, options: Vec<(String, Type)> },
    Array { elem: Box<Type>, len: u64 },
    Sequence { elem: Box<Type>, len_path: String },
}

/// A top-level block (`trace`, `env`, `clock`, `stream`, `event`, `callsite`) as key → value.
#[derive(Clone, Debug, Default)]
pub struct Block {
    pub attrs: HashMap<String, AttrValue>,
    pub types: HashMap<String, Type>,
}

#[derive(Debug, Default)]
pub struct Ast {
    pub trace: Option<Block>,
    pub env: Option<Block>,
    pub clocks: Vec<Block>,
    pub streams: Vec<Block>,
    pub events: Vec<Block>,
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    pos: usize,
    depth: usize,
    /// typealias / typedef names and named struct/variant/enum definitions, metadata-wide
    /// (LTTng declares them at top level before use).
    aliases: HashMap<String, Type>,
    structs: HashMap<String, Type>,
    variants: HashMap<String, Type>,
    enums: HashMap<String, Type>,
}

pub fn parse(src: &str) -> Result<Ast, Error> {
    let toks = Lexer::tokens(src)?;
    let mut p = Parser {
        toks,
        pos: 0,
        depth: 0,
        aliases: HashMap::new(),
        structs: HashMap::new(),
        variants: HashMap::new(),
        enums: HashMap::new(),
    };
    p.top()
}

fn is_keyword(s: &str) -> bool {
    matches!(
        s,
        "integer" | "floating_point" | "string" | "struct" | "variant" | "enum" | "typealias" | "typedef"
            | "align" | "const" | "signed" | "unsigned"
    )
}

impl Parser {
    fn line(&self) -> usize {
        self.toks.get(self.pos).or(self.toks.last()).map(|t| t.1).unwrap_or(1)
    }
    fn err(&self, msg: impl Into<String>) -> Error {
        Error::Metadata { line: self.line(), msg: msg.into() }
    }
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.0)
    }
    fn peek_at(&self, n: usize) -> Option<&Tok> {
        self.toks.get(self.pos + n).map(|t| &t.0)
    }
    fn bump(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).map(|t| t.0.clone());
        self.pos += 1;
        t
    }
    fn is_punct(&self, p: &str) -> bool {
        matches!(self.peek(), Some(Tok::Punct(q)) if *q == p)
    }
    fn is_ident(&self, s: &str) -> bool {
        matches!(self.peek(), Some(Tok::Ident(q)) if q == s)
    }
    fn eat_punct(&mut self, p: &str) -> bool {
        if self.is_punct(p) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, p: &str) -> Result<(), Error> {
        if self.eat_punct(p) {
            Ok(())
        } else {
            Err(self.err(format!("expected `{p}`, found {}", self.describe())))
        }
    }
    fn describe(&self) -> String {
        match self.peek() {
            None => "end of metadata".into(),
            Some(Tok::Ident(s)) => format!("`{s}`"),
            Some(Tok::Int(v)) => format!("`{v}`"),
            Some(Tok::Str(s)) => format!("\"{s}\""),
            Some(Tok::Punct(p)) => format!("`{p}`"),
        }
    }
    fn ident(&mut self) -> Result<String, Error> {
        match self.bump() {
            Some(Tok::Ident(s)) => Ok(s),
            _ => {
                self.pos -= 1;
                Err(self.err(format!("expected a name, found {}", self.describe())))
            }
        }
    }
    fn enter(&mut self) -> Result<(), Error> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err("declarations nest too deeply"));
        }
        Ok(())
    }

    fn top(&mut self) -> Result<Ast, Error> {
        let mut ast = Ast::default();
        while self.peek().is_some() {
            if self.eat_punct(";") {
                continue;
            }
            let kw = match self.peek() {
                Some(Tok::Ident(s)) => s.clone(),
                _ => return Err(self.err(format!("expected a declaration, found {}", self.describe()))),
            };
            match kw.as_str() {
                "trace" | "env" | "clock" | "stream" | "event" | "callsite"
                    if matches!(self.peek_at(1), Some(Tok::Punct("{"))) =>
                {
                    self.pos += 2;
                    let block = self.block_body()?;
                    self.eat_punct(";");
                    match kw.as_str() {
                        "trace" => ast.trace = Some(block),
                        "env" => ast.env = Some(block),
                        "clock" => ast.clocks.push(block),
                        "stream" => ast.streams.push(block),
                        "event" => ast.events.push(block),
                        _ => {}
                    }
                }
                "typealias" | "typedef" => self.alias_decl()?,
                _ => {
                    self.type_spec()?;
                    self.expect(";")?;
                }
            }
        }
        Ok(ast)
    }

    /// `key = value;`, `key := type;`, typealias/typedef, up to the closing `}`.
    fn block_body(&mut self) -> Result<Block, Error> {
        let mut block = Block::default();
        loop {
            if self.eat_punct("}") {
                return Ok(block);
            }
            if self.eat_punct(";") {
                continue;
            }
            if self.is_ident("typealias") || self.is_ident("typedef") {
                self.alias_decl()?;
                continue;
            }
            let key = self.dotted()?;
            if self.eat_punct(":=") {
                let t = self.type_spec()?;
                block.types.insert(key, t);
            } else {
                self.expect("=")?;
                let v = self.attr_value()?;
                block.attrs.insert(key, v);
            }
            self.expect(";")?;
        }
    }

    fn dotted(&mut self) -> Result<String, Error> {
        let mut s = self.ident()?;
        while self.is_punct(".") {
            self.pos += 1;
            s.push('.');
            s.push_str(&self.ident()?);
        }
        Ok(s)
    }

    fn attr_value(&mut self) -> Result<AttrValue, Error> {
        match self.peek() {
            Some(Tok::Int(v)) => {
                let v = *v;
                self.pos += 1;
                Ok(AttrValue::Int(v))
            }
            Some(Tok::Str(s)) => {
                let s = s.clone();
                self.pos += 1;
                Ok(AttrValue::Str(s))
            }
            Some(Tok::Ident(_)) => Ok(AttrValue::Path(self.dotted()?)),
            _ => Err(self.err(format!("expected a value, found {}", self.describe()))),
        }
    }

    fn alias_decl(&mut self) -> Result<(), Error> {
        let kw = self.ident()?;
        let t = self.type_spec()?;
        if kw == "typealias" {
            self.expect(":=")?;
            let mut words = Vec::new();
            while let Some(Tok::Ident(_)) = self.peek() {
                words.push(self.ident()?);
            }
            if words.is_empty() {
                return Err(self.err("typealias without a name"));
            }
            self.aliases.insert(words.join(" "), t);
        } else {
            let (name, t) = self.declarator(t)?;
            self.aliases.insert(name, t);
        }
        self.expect(";")
    }

    /// A type: a keyword form or the name of an alias (possibly several words: `unsigned long`).
    fn type_spec(&mut self) -> Result<Type, Error> {
        self.enter()?;
        let r = self.type_spec_inner();
        self.depth -= 1;
        r
    }

    fn type_spec_inner(&mut self) -> Result<Type, Error> {
        let kw = match self.peek() {
            Some(Tok::Ident(s)) => s.clone(),
            _ => return Err(self.err(format!("expected a type, found {}", self.describe()))),
        };
        match kw.as_str() {
            "integer" => {
                self.pos += 1;
                self.expect("{")?;
                let attrs = self.attrs()?;
                Ok(Type::Int(self.int_type(&attrs)?))
            }
            "floating_point" => {
                self.pos += 1;
                self.expect("{")?;
                let attrs = self.attrs()?;
                let get = |k: &str| attrs.get(k).and_then(AttrValue::as_int);
                let exp = get("exp_dig").ok_or_else(|| self.err("floating_point without exp_dig"))? as u32;
                let mant = get("mant_dig").ok_or_else(|| self.err("floating_point without mant_dig"))? as u32;
                if !matches!((exp, mant), (8, 24) | (11, 53)) {
                    return Err(self.err(format!("floating_point exp_dig {exp} mant_dig {mant}: only IEEE binary32 and binary64 are supported")));
                }
                let align = get("align").unwrap_or(8) as u32;
                Ok(Type::Float { exp, align: check_align(align).map_err(|m| self.err(m))?, byte_order: byte_order(&attrs) })
            }
            "string" => {
                self.pos += 1;
                if self.eat_punct("{") {
                    self.attrs()?;
                }
                Ok(Type::Str)
            }
            "struct" => {
                self.pos += 1;
                let name = if let Some(Tok::Ident(_)) = self.peek() { Some(self.ident()?) } else { None };
                let t = if self.eat_punct("{") {
                    let fields = self.fields()?;
                    let mut align = 1;
                    if self.is_ident("align") {
                        self.pos += 1;
                        self.expect("(")?;
                        align = self.int()? as u32;
                        self.expect(")")?;
                    }
                    let t = Type::Struct { fields, align: check_align(align).map_err(|m| self.err(m))? };
                    if let Some(n) = &name {
                        self.structs.insert(n.clone(), t.clone());
                    }
                    t
                } else {
                    let n = name.ok_or_else(|| self.err("`struct` without a name or body"))?;
                    self.structs.get(&n).cloned().ok_or_else(|| self.err(format!("unknown struct `{n}`")))?
                };
                Ok(t)
            }
            "variant" => {
                self.pos += 1;
                let name = if let Some(Tok::Ident(_)) = self.peek() { Some(self.ident()?) } else { None };
                let tag = if self.eat_punct("<") {
                    let t = self.dotted()?;
                    self.expect(">")?;
                    Some(t)
                } else {
                    None
                };
                if self.eat_punct("{") {
                    let options = self.fields()?;
                    let t = Type::Variant { tag, options };
                    if let Some(n) = &name {
                        self.variants.insert(n.clone(), t.clone());
                    }
                    Ok(t)
                } else {
                    let n = name.ok_or_else(|| self.err("`variant` without a name or body"))?;
                    match self.variants.get(&n).cloned() {
                        Some(Type::Variant { options, tag: old }) => Ok(Type::Variant { tag: tag.or(old), options }),
                        _ => Err(self.err(format!("unknown variant `{n}`"))),
                    }
                }
            }
            "enum" => {
                self.pos += 1;
                let name = if let Some(Tok::Ident(_)) = self.peek() { Some(self.ident()?) } else { None };
                let container = if self.eat_punct(":") {
                    self.type_spec()?
                } else {
                    self.aliases.get("int").cloned().ok_or_else(|| self.err("enum without a container type and no `int` alias"))?
                };
                let int = match container {
                    Type::Int(i) => i,
                    _ => return Err(self.err("an enum's container type must be an integer")),
                };
                if self.eat_punct("{") {
                    let mappings = self.enumerators()?;
                    let t = Type::Enum { int, mappings };
                    if let Some(n) = &name {
                        self.enums.insert(n.clone(), t.clone());
                    }
                    Ok(t)
                } else {
                    let n = name.ok_or_else(|| self.err("`enum` without a name or body"))?;
                    self.enums.get(&n).cloned().ok_or_else(|| self.err(format!("unknown enum `{n}`")))
                }
            }
            _ => {
                // An alias name, possibly of several words (`unsigned long`): take the longest
                // run of words that names an alias, so a following declarator is left alone.
                let mut words: Vec<String> = Vec::new();
                let mut best = 0;
                while let Some(Tok::Ident(s)) = self.peek_at(words.len()) {
                    words.push(s.clone());
                    let name = words.join(" ");
                    if self.aliases.contains_key(&name) {
                        best = words.len();
                    }
                    let prefix = name + " ";
                    if !self.aliases.keys().any(|k| k.starts_with(&prefix)) {
                        break;
                    }
                }
                let name = if best == 0 { words.first().cloned().unwrap_or_default() } else { words[..best].join(" ") };
                self.pos += best.max(1);
                self.aliases.get(&name).cloned().ok_or_else(|| self.err(format!("unknown type `{name}`")))
            }
        }
    }

    fn int(&mut self) -> Result<i128, Error> {
        match self.bump() {
            Some(Tok::Int(v)) => Ok(v),
            _ => {
                self.pos -= 1;
                Err(self.err(format!("expected an integer, found {}", self.describe())))
            }
        }
    }

    fn attrs(&mut self) -> Result<HashMap<String, AttrValue>, Error> {
        let mut attrs = HashMap::new();
        loop {
            if self.eat_punct("}") {
                return Ok(attrs);
            }
            if self.eat_punct(";") {
                continue;
            }
            let key = self.dotted()?;
            self.expect("=")?;
            let v = self.attr_value()?;
            attrs.insert(key, v);
        }
    }

    fn int_type(&self, attrs: &HashMap<String, AttrValue>) -> Result<IntType, Error> {
        let size = attrs.get("size").and_then(AttrValue::as_int).ok_or_else(|| self.err("integer without size"))?;
        if !(1..=64).contains(&size) {
            return Err(self.err(format!("integer size {size}: must be 1 to 64 bits")));
        }
        let align = attrs.get("align").and_then(AttrValue::as_int).unwrap_or(if size % 8 == 0 { 8 } else { 1 });
        let signed = attrs.get("signed").and_then(AttrValue::as_int).unwrap_or(0) != 0;
        let text = matches!(attrs.get("encoding").map(AttrValue::text).as_deref(), Some("UTF8" | "utf8" | "ASCII" | "ascii"));
        let clock = match attrs.get("map") {
            Some(AttrValue::Path(p)) => {
                let mut parts = p.split('.');
                match (parts.next(), parts.next(), parts.next()) {
                    (Some("clock"), Some(name), Some("value")) => Some(name.to_string()),
                    _ => return Err(self.err(format!("map = {p}: expected clock.NAME.value"))),
                }
            }
            _ => None,
        };
        Ok(IntType {
            size: size as u32,
            align: check_align(align as u32).map_err(|m| self.err(m))?,
            signed,
            byte_order: byte_order(attrs),
            text,
            clock,
        })
    }

    fn enumerators(&mut self) -> Result<Vec<Mapping>, Error> {
        let mut out = Vec::new();
        let mut next = 0i128;
        loop {
            if self.eat_punct("}") {
                return Ok(out);
            }
            let label = match self.bump() {
                Some(Tok::Ident(s)) | Some(Tok::Str(s)) => s,
                _ => {
                    self.pos -= 1;
                    return Err(self.err(format!("expected an enumerator, found {}", self.describe())));
                }
            };
            let (lo, hi) = if self.eat_punct("=") {
                let lo = self.int()?;
                let hi = if self.eat_punct("...") { self.int()? } else { lo };
                (lo, hi)
            } else {
                (next, next)
            };
            next = hi + 1;
            out.push(Mapping { label, lo, hi });
            if !self.eat_punct(",") {
                self.expect("}")?;
                return Ok(out);
            }
        }
    }

    fn fields(&mut self) -> Result<Vec<(String, Type)>, Error> {
        let mut out = Vec::new();
        loop {
            if self.eat_punct("}") {
                return Ok(out);
            }
            if self.eat_punct(";") {
                continue;
            }
            if self.is_ident("typealias") || self.is_ident("typedef") {
                self.alias_decl()?;
                continue;
            }
            let is_plain_name = matches!(self.peek(), Some(Tok::Ident(s)) if !is_keyword(s));
            let t = if is_plain_name {
                // `unsigned long events_discarded;`: every word but the last names the type.
                let start = self.pos;
                let mut n = 0;
                while let Some(Tok::Ident(_)) = self.peek_at(n) {
                    n += 1;
                }
                let words: Vec<String> = (0..n - 1)
                    .map(|i| match &self.toks[start + i].0 {
                        Tok::Ident(s) => s.clone(),
                        _ => unreachable!(),
                    })
                    .collect();
                if words.is_empty() {
                    return Err(self.err(format!("field `{}` has no type", self.describe())));
                }
                let name = words.join(" ");
                self.pos += n - 1;
                self.aliases.get(&name).cloned().ok_or_else(|| self.err(format!("unknown type `{name}`")))?
            } else {
                self.type_spec()?
            };
            let (name, t) = self.declarator(t)?;
            self.expect(";")?;
            out.push((name, t));
        }
    }

    /// `name`, `name[16]`, `name[len_field]` (sequence), dimensions nesting outermost first.
    fn declarator(&mut self, t: Type) -> Result<(String, Type), Error> {
        let name = self.ident()?;
        let mut dims = Vec::new();
        while self.eat_punct("[") {
            match self.peek() {
                Some(Tok::Int(v)) => {
                    let v = *v;
                    self.pos += 1;
                    if !(0..=u32::MAX as i128).contains(&v) {
                        return Err(self.err(format!("array length {v} out of range")));
                    }
                    dims.push(Err(v as u64));
                }
                _ => dims.push(Ok(self.dotted()?)),
            }
            self.expect("]")?;
        }
        let mut t = t;
        for d in dims.into_iter().rev() {
            t = match d {
                Err(len) => Type::Array { elem: Box::new(t), len },
                Ok(len_path) => Type::Sequence { elem: Box::new(t), len_path },
            };
        }
        Ok((name, t))
    }
}

fn check_align(a: u32) -> Result<u32, String> {
    if a == 0 || !a.is_power_of_two() || a > 4096 {
        Err(format!("alignment {a} is not a power of two up to 4096 bits"))
    } else {
        Ok(a)
    }
}

fn byte_order(attrs: &HashMap<String, AttrValue>) -> ByteOrder {
    match attrs.get("byte_order").map(AttrValue::text).as_deref() {
        Some("le" | "little_endian") => ByteOrder::Little,
        Some("be" | "big_endian" | "network") => ByteOrder::Big,
        _ => ByteOrder::Native,
    }
}
