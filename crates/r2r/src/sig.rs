//! ECMA-335 signatures (with ReadyToRun's extra element types) parsed into [`Ty`] trees and
//! spelled the way the runtime spells methods in perf maps.

use crate::error::{Error, Result};

/// ECMA-335 compressed unsigned integer (II.23.2): big-endian, 1, 2 or 4 bytes.
pub fn uncompress(b: &[u8]) -> Option<(u32, usize)> {
    let first = *b.first()? as u32;
    if first & 0x80 == 0 {
        Some((first, 1))
    } else if first & 0xc0 == 0x80 {
        Some((((first & 0x3f) << 8) | *b.get(1)? as u32, 2))
    } else if first & 0xe0 == 0xc0 {
        let rest = b.get(1..4)?;
        Some((((first & 0x1f) << 24) | (rest[0] as u32) << 16 | (rest[1] as u32) << 8 | rest[2] as u32, 4))
    } else {
        None
    }
}

/// Which module's metadata a token belongs to: None = the image's own, Some(i) = ReadyToRun module index i.
pub type Module = Option<u32>;

#[derive(Clone, Debug, PartialEq)]
pub enum Ty {
    Prim(u8),
    /// A TypeDef (table 2), TypeRef (1) or TypeSpec (0x1b) row.
    Named { module: Module, table: usize, row: u32, value_type: bool },
    Ptr(Box<Ty>),
    ByRef(Box<Ty>),
    SzArray(Box<Ty>),
    Array(Box<Ty>, u32),
    GenericInst(Box<Ty>, Vec<Ty>),
    Var(u32),
    MVar(u32),
    /// ELEMENT_TYPE_VAR_ZAPSIG: a type variable given by its GenericParam row, not its index.
    GenericParam(u32),
    /// `System.__Canon`, the shared instantiation of reference types.
    Canon,
    /// A function pointer (`delegate*<…>`) with its own signature.
    FnPtr(Box<MethodSig>),
    Modified { ty: Box<Ty>, modifier: Box<Ty>, required: bool },
}

/// A method signature blob, parsed.
#[derive(Clone, Debug, PartialEq)]
pub struct MethodSig {
    /// The signature's first byte: calling convention (low nibble) and flags (`HASTHIS` 0x20,
    /// `EXPLICITTHIS` 0x40, `GENERIC` 0x10).
    pub conv: u8,
    pub has_this: bool,
    pub ret: Ty,
    pub params: Vec<Ty>,
}

const MAX_DEPTH: u32 = 64;

/// A cursor over signature bytes; `base` is the file offset of `b[0]` (for errors).
pub struct SigReader<'a> {
    pub b: &'a [u8],
    pub pos: usize,
    pub base: usize,
    module: Module,
}

impl<'a> SigReader<'a> {
    pub fn new(b: &'a [u8], pos: usize, base: usize) -> Self {
        SigReader { b, pos, base, module: None }
    }

    pub fn err(&self, what: impl Into<String>) -> Error {
        Error { offset: (self.base + self.pos) as u64, what: what.into() }
    }

    pub fn byte(&mut self) -> Result<u8> {
        let v = *self.b.get(self.pos).ok_or_else(|| self.err("signature runs past its end"))?;
        self.pos += 1;
        Ok(v)
    }

    pub fn uint(&mut self) -> Result<u32> {
        let (v, n) = uncompress(self.b.get(self.pos..).unwrap_or(&[])).ok_or_else(|| self.err("bad compressed integer in a signature"))?;
        self.pos += n;
        Ok(v)
    }

    fn count(&mut self, what: &str) -> Result<usize> {
        let n = self.uint()? as usize;
        // Every element takes at least one byte: a larger count is a lie, not an allocation to make.
        if n > self.b.len().saturating_sub(self.pos) {
            return Err(self.err(format!("{what} count {n} exceeds the signature's remaining bytes")));
        }
        Ok(n)
    }

    fn type_token(&mut self, value_type: bool) -> Result<Ty> {
        let coded = self.uint()?;
        let table = match coded & 3 {
            0 => crate::metadata::TYPE_DEF,
            1 => crate::metadata::TYPE_REF,
            2 => crate::metadata::TYPE_SPEC,
            _ => return Err(self.err("type token with tag 3")),
        };
        Ok(Ty::Named { module: self.module, table, row: coded >> 2, value_type })
    }

    pub fn ty(&mut self) -> Result<Ty> {
        self.ty_at(0)
    }

    fn ty_at(&mut self, depth: u32) -> Result<Ty> {
        if depth > MAX_DEPTH {
            return Err(self.err("signature nests too deeply"));
        }
        let d = depth + 1;
        let code = self.byte()?;
        Ok(match code {
            0x01..=0x0e | 0x16 | 0x18 | 0x19 | 0x1c => Ty::Prim(code),
            0x0f => Ty::Ptr(Box::new(self.ty_at(d)?)),
            0x10 => Ty::ByRef(Box::new(self.ty_at(d)?)),
            0x11 => self.type_token(true)?,
            0x12 => self.type_token(false)?,
            0x13 => Ty::Var(self.uint()?),
            0x1e => Ty::MVar(self.uint()?),
            0x14 => {
                let elem = self.ty_at(d)?;
                let rank = self.uint()?;
                let sizes = self.count("array size")?;
                for _ in 0..sizes {
                    self.uint()?;
                }
                let bounds = self.count("array lower bound")?;
                for _ in 0..bounds {
                    self.uint()?;
                }
                if rank == 0 { Ty::SzArray(Box::new(elem)) } else { Ty::Array(Box::new(elem), rank) }
            }
            0x1d => Ty::SzArray(Box::new(self.ty_at(d)?)),
            0x15 => {
                let generic = self.ty_at(d)?;
                let n = self.count("generic argument")?;
                let mut args = Vec::with_capacity(n);
                for _ in 0..n {
                    args.push(self.ty_at(d)?);
                }
                Ty::GenericInst(Box::new(generic), args)
            }
            0x1b => {
                Ty::FnPtr(Box::new(self.method_sig_at(d)?))
            }
            0x1f | 0x20 => {
                let modifier = self.type_token(false)?;
                let ty = self.ty_at(d)?;
                Ty::Modified { ty: Box::new(ty), modifier: Box::new(modifier), required: code == 0x1f }
            }
            0x45 => self.ty_at(d)?, // pinned
            0x3b => Ty::GenericParam(self.uint()?),
            // ELEMENT_TYPE_NATIVE_VALUETYPE_ZAPSIG: the unmanaged view of the value type that follows.
            0x3d => self.ty_at(d)?,
            0x3e => Ty::Canon,
            0x3f => {
                let index = self.uint()?;
                let saved = self.module;
                self.module = Some(index);
                let inner = self.ty_at(d);
                self.module = saved;
                inner?
            }
            other => return Err(Error { offset: (self.base + self.pos - 1) as u64, what: format!("unsupported element type {other:#x} in a signature") }),
        })
    }

    /// A MethodDefSig / MethodRefSig / StandAloneMethodSig (II.23.2.1–3).
    pub fn method_sig(&mut self) -> Result<MethodSig> {
        self.method_sig_at(0)
    }

    fn method_sig_at(&mut self, depth: u32) -> Result<MethodSig> {
        let conv = self.byte()?;
        if conv & 0x10 != 0 {
            self.uint()?; // generic parameter count
        }
        let n = self.count("parameter")?;
        let ret = self.ty_at(depth + 1)?;
        let mut params = Vec::with_capacity(n);
        for _ in 0..n {
            if self.b.get(self.pos) == Some(&0x41) {
                self.pos += 1; // vararg sentinel
            }
            params.push(self.ty_at(depth + 1)?);
        }
        Ok(MethodSig { conv, has_this: conv & 0x20 != 0, ret, params })
    }

    /// The module context tokens are read in (changed by MODULE_ZAPSIG and UpdateContext).
    pub fn set_module(&mut self, m: Module) {
        self.module = m;
    }
}

pub fn prim_il(code: u8) -> &'static str {
    match code {
        0x01 => "void",
        0x02 => "bool",
        0x03 => "char",
        0x04 => "int8",
        0x05 => "uint8",
        0x06 => "int16",
        0x07 => "uint16",
        0x08 => "int32",
        0x09 => "uint32",
        0x0a => "int64",
        0x0b => "uint64",
        0x0c => "float32",
        0x0d => "float64",
        0x0e => "string",
        0x16 => "typedref",
        0x18 => "native int",
        0x19 => "native uint",
        _ => "object",
    }
}

pub fn prim_clr(code: u8) -> &'static str {
    match code {
        0x01 => "System.Void",
        0x02 => "System.Boolean",
        0x03 => "System.Char",
        0x04 => "System.SByte",
        0x05 => "System.Byte",
        0x06 => "System.Int16",
        0x07 => "System.UInt16",
        0x08 => "System.Int32",
        0x09 => "System.UInt32",
        0x0a => "System.Int64",
        0x0b => "System.UInt64",
        0x0c => "System.Single",
        0x0d => "System.Double",
        0x0e => "System.String",
        0x16 => "System.TypedReference",
        0x18 => "System.IntPtr",
        0x19 => "System.UIntPtr",
        _ => "System.Object",
    }
}
