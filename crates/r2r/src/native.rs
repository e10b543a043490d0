//! The runtime's NativeFormat encodings (variable-length integers, sparse arrays, hashtables) as
//! the "ReadyToRun File Format" design doc and the runtime's NativeFormat reader describe them.
//! All offsets are file offsets.

use crate::error::{Bytes, Result, bad};

/// NativeFormat unsigned integer: the count of low one-bits in the first byte says how many bytes follow.
pub fn decode_unsigned(b: Bytes, off: usize) -> Result<(u32, usize)> {
    let first = b.u8(off, "NativeFormat integer")? as u32;
    let byte = |i: usize| -> Result<u32> { Ok(b.u8(off + i, "NativeFormat integer")? as u32) };
    Ok(if first & 1 == 0 {
        (first >> 1, off + 1)
    } else if first & 2 == 0 {
        ((first >> 2) | (byte(1)? << 6), off + 2)
    } else if first & 4 == 0 {
        ((first >> 3) | (byte(1)? << 5) | (byte(2)? << 13), off + 3)
    } else if first & 8 == 0 {
        ((first >> 4) | (byte(1)? << 4) | (byte(2)? << 12) | (byte(3)? << 20), off + 4)
    } else if first & 16 == 0 {
        (b.u32(off + 1, "NativeFormat integer")?, off + 5)
    } else {
        return bad(off as u64, format!("bad NativeFormat integer prefix byte {first:#x}"));
    })
}

pub fn decode_signed(b: Bytes, off: usize) -> Result<(i32, usize)> {
    let first = b.u8(off, "NativeFormat integer")? as i32;
    let byte = |i: usize| -> Result<i32> { Ok(b.u8(off + i, "NativeFormat integer")? as i32) };
    Ok(if first & 1 == 0 {
        ((first as i8 as i32) >> 1, off + 1)
    } else if first & 2 == 0 {
        ((first >> 2) | ((byte(1)? as i8 as i32) << 6), off + 2)
    } else if first & 4 == 0 {
        ((first >> 3) | (byte(1)? << 5) | ((byte(2)? as i8 as i32) << 13), off + 3)
    } else if first & 8 == 0 {
        ((first >> 4) | (byte(1)? << 4) | (byte(2)? << 12) | ((byte(3)? as i8 as i32) << 20), off + 4)
    } else if first & 16 == 0 {
        (b.u32(off + 1, "NativeFormat integer")? as i32, off + 5)
    } else {
        return bad(off as u64, format!("bad NativeFormat integer prefix byte {first:#x}"));
    })
}

const BLOCK_SIZE: u32 = 16;

/// A sparse array: blocks of 16 elements, each block a small binary tree of present indices.
pub struct NativeArray<'a> {
    b: Bytes<'a>,
    base: usize,
    pub len: u32,
    entry_index_size: u8,
}

impl<'a> NativeArray<'a> {
    pub fn new(b: Bytes<'a>, off: usize) -> Result<NativeArray<'a>> {
        let (val, base) = decode_unsigned(b, off)?;
        let entry_index_size = (val & 3) as u8;
        if entry_index_size > 2 {
            return bad(off as u64, "NativeArray entry index size 3 is undefined");
        }
        Ok(NativeArray { b, base, len: val >> 2, entry_index_size })
    }

    /// The offset of element `index`, or None when the array holds nothing there.
    pub fn get(&self, index: u32) -> Result<Option<usize>> {
        if index >= self.len {
            return Ok(None);
        }
        let block = (index / BLOCK_SIZE) as usize;
        let mut off = self.base
            + match self.entry_index_size {
                0 => self.b.u8(self.base + block, "NativeArray block index")? as usize,
                1 => self.b.u16(self.base + 2 * block, "NativeArray block index")? as usize,
                _ => self.b.u32(self.base + 4 * block, "NativeArray block index")? as usize,
            };
        let mut bit = BLOCK_SIZE >> 1;
        while bit > 0 {
            let (val, next) = decode_unsigned(self.b, off)?;
            if index & bit != 0 {
                if val & 2 != 0 {
                    off += (val >> 2) as usize;
                    bit >>= 1;
                    continue;
                }
            } else if val & 1 != 0 {
                off = next;
                bit >>= 1;
                continue;
            }
            if val & 3 == 0 && (val >> 2) == index & (BLOCK_SIZE - 1) {
                return Ok(Some(next));
            }
            return Ok(None);
        }
        Ok(Some(off))
    }
}

/// Every entry offset of a NativeFormat hashtable (buckets of (low hash byte, relative offset)).
pub fn hashtable_entries(b: Bytes, off: usize, end: usize) -> Result<Vec<usize>> {
    let header = b.u8(off, "NativeHashtable header")?;
    let base = off + 1;
    let shift = (header >> 2) as u32;
    if shift > 24 {
        return bad(off as u64, format!("NativeHashtable with 2^{shift} buckets"));
    }
    let buckets = 1usize << shift;
    let entry_size = 1usize << (header & 3);
    if entry_size > 4 {
        return bad(off as u64, "NativeHashtable entry index size 8 is undefined");
    }
    let bucket_start = |i: usize| -> Result<usize> {
        let at = base + i * entry_size;
        Ok(base
            + match entry_size {
                1 => b.u8(at, "NativeHashtable bucket")? as usize,
                2 => b.u16(at, "NativeHashtable bucket")? as usize,
                _ => b.u32(at, "NativeHashtable bucket")? as usize,
            })
    };
    let mut out = Vec::new();
    let mut next_start = bucket_start(0)?;
    for i in 0..buckets {
        let mut at = next_start;
        next_start = bucket_start(i + 1)?;
        // Buckets follow each other; one that starts before its predecessor would make entries
        // be read again for every bucket, a quadratic blow-up from two bytes.
        if next_start < at {
            return bad((base + (i + 1) * entry_size) as u64, format!("NativeHashtable bucket {} starts before bucket {i}", i + 1));
        }
        let stop = next_start.min(end);
        while at < stop {
            let entry_at = at + 1; // after the low hash byte
            let (delta, next) = decode_signed(b, entry_at)?;
            let target = entry_at as i64 + delta as i64;
            if target < 0 || target as usize >= b.len() {
                return bad(entry_at as u64, "NativeHashtable entry points outside the file");
            }
            out.push(target as usize);
            at = next;
        }
    }
    Ok(out)
}

/// The runtime function index after a method entry: `id` with flag bits for fixups.
pub fn entry_point(b: Bytes, off: usize) -> Result<u32> {
    let (id, _) = decode_unsigned(b, off)?;
    Ok(if id & 1 != 0 { id >> 2 } else { id >> 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashtable_buckets_out_of_order_are_an_error() {
        // Two one-byte buckets: the second starts before the first, which would have every bucket
        // reread the entries between them.
        let data = [0x04, 4, 2, 4, 0, 0, 0, 0];
        let e = hashtable_entries(Bytes(&data), 0, data.len()).unwrap_err();
        assert!(e.what.contains("starts before"), "{e}");
        // In order, the table reads its one entry: low hash byte at 4, then a relative offset of 0
        // from byte 5.
        let data = [0x04, 3, 5, 5, 0, 0];
        assert_eq!(hashtable_entries(Bytes(&data), 0, data.len()).unwrap(), vec![5]);
    }
}
