//! Little-endian base-128 (LEB128) integers, the compressed event header's encoding.

/// Why a varint could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VarIntError {
    /// The input ended inside the number.
    Truncated,
    /// More continuation bytes than the type can hold (5 for u32, 10 for u64).
    TooLong,
}

/// Reads an unsigned LEB128 `u64` from `buf` at `*pos`, advancing `*pos` past it.
/// Bits beyond 64 in the 10th byte are ignored, as the runtime's reader does.
/// (The reader calls [`read_u64_with`], choosing how bits are squeezed; this is for tests.)
#[cfg(test)]
pub fn read_u64(buf: &[u8], pos: &mut usize) -> Result<u64, VarIntError> {
    read_u64_with::<Shifts>(buf, pos)
}

/// Reads an unsigned LEB128 `u32` (at most 5 bytes; high bits of the 5th byte are dropped).
#[cfg(test)]
pub fn read_u32(buf: &[u8], pos: &mut usize) -> Result<u32, VarIntError> {
    read_u32_with::<Shifts>(buf, pos)
}

/// Reads an unsigned LEB128 `u64` from `buf` at `*pos`, advancing `*pos` past it, squeezing its
/// bits with `S`. Bits beyond 64 in the 10th byte are ignored, as the runtime's reader does.
#[inline(always)]
pub(crate) fn read_u64_with<S: Squeeze>(buf: &[u8], pos: &mut usize) -> Result<u64, VarIntError> {
    match word_at::<S>(buf, *pos) {
        Some((value, len)) => {
            *pos += len;
            Ok(value)
        }
        None => read_u64_bytewise(buf, pos),
    }
}

/// Reads an unsigned LEB128 `u32` (at most 5 bytes; high bits of the 5th byte are dropped),
/// squeezing its bits with `S`.
#[inline(always)]
pub(crate) fn read_u32_with<S: Squeeze>(buf: &[u8], pos: &mut usize) -> Result<u32, VarIntError> {
    match word_at::<S>(buf, *pos) {
        Some((value, len)) if len <= 5 => {
            *pos += len;
            Ok(value as u32)
        }
        _ => read_u32_bytewise(buf, pos),
    }
}

/// The varint at `at` when it ends within the 8 bytes there (every header field the runtime
/// writes but the largest ids): its value and length, decoded from one load without a branch
/// per byte (an event header holds two to five varints of varying length, and a branch per byte
/// mispredicted at every event). `None` when fewer than 8 bytes remain or the number is longer.
#[inline(always)]
fn word_at<S: Squeeze>(buf: &[u8], at: usize) -> Option<(u64, usize)> {
    let first = *buf.get(at)?;
    if first < 0x80 {
        return Some((u64::from(first), 1));
    }
    let word = u64::from_le_bytes(buf.get(at..at + 8)?.try_into().ok()?);
    let stops = !word & 0x8080_8080_8080_8080;
    if stops == 0 {
        return None;
    }
    let len = stops.trailing_zeros() as usize / 8 + 1;
    let bits = if len == 8 { word } else { word & ((1u64 << (len * 8)) - 1) };
    Some((S::squeeze(bits), len))
}

/// How the 7-bit groups of a varint's bytes (continuation bits included, bytes past its end
/// zero) are put together into its value.
pub(crate) trait Squeeze {
    fn squeeze(bits: u64) -> u64;
}

/// With shifts and masks: 7-bit groups → 14 → 28 → 56 bits.
pub(crate) struct Shifts;

impl Squeeze for Shifts {
    #[inline(always)]
    fn squeeze(bits: u64) -> u64 {
        let mut x = bits & 0x7f7f_7f7f_7f7f_7f7f;
        x = (x & 0x007f_007f_007f_007f) | ((x & 0x7f00_7f00_7f00_7f00) >> 1);
        x = (x & 0x0000_3fff_0000_3fff) | ((x & 0x3fff_0000_3fff_0000) >> 2);
        (x & 0x0000_0000_0fff_ffff) | ((x & 0x0fff_ffff_0000_0000) >> 4)
    }
}

/// With one BMI2 `pext`: only in code built for BMI2 (`#[target_feature(enable = "bmi2")]`),
/// run where [`fast_pext`] says yes. The squeeze by shifts was a third of a header loop's time.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Pext;

#[cfg(target_arch = "x86_64")]
impl Squeeze for Pext {
    #[inline(always)]
    fn squeeze(bits: u64) -> u64 {
        // SAFETY: `Pext` is used only in functions built with BMI2 and called only where the CPU
        // has it (`fast_pext`).
        unsafe { pext_7_bit_groups(bits) }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "bmi2")]
#[inline]
unsafe fn pext_7_bit_groups(bits: u64) -> u64 {
    std::arch::x86_64::_pext_u64(bits, 0x7f7f_7f7f_7f7f_7f7f)
}

/// Whether this CPU has a fast `pext`: BMI2 on Intel, and on AMD from Zen 3 (family 0x19) on;
/// Zen 1 and 2 (and Hygon) run it in microcode, slower than the shifts.
#[cfg(target_arch = "x86_64")]
pub(crate) fn fast_pext() -> bool {
    use std::sync::atomic::{AtomicU8, Ordering};
    static KNOWN: AtomicU8 = AtomicU8::new(0);
    match KNOWN.load(Ordering::Relaxed) {
        1 => return false,
        2 => return true,
        _ => {}
    }
    let fast = std::arch::is_x86_feature_detected!("bmi2") && {
        use std::arch::x86_64::__cpuid;
        let vendor = __cpuid(0);
        let name: Vec<u8> = [vendor.ebx, vendor.edx, vendor.ecx].iter().flat_map(|r| r.to_le_bytes()).collect();
        let signature = __cpuid(1).eax;
        let family = ((signature >> 8) & 0xf) + if (signature >> 8) & 0xf == 0xf { (signature >> 20) & 0xff } else { 0 };
        match &name[..] {
            b"GenuineIntel" => true,
            b"AuthenticAMD" => family >= 0x19,
            _ => false,
        }
    };
    KNOWN.store(if fast { 2 } else { 1 }, Ordering::Relaxed);
    fast
}

/// [`read_u64_with`] a byte at a time: near the end of the input and for numbers of 9 or 10 bytes.
fn read_u64_bytewise(buf: &[u8], pos: &mut usize) -> Result<u64, VarIntError> {
    let mut result = 0u64;
    let mut shift = 0u32;
    loop {
        let Some(&byte) = buf.get(*pos) else { return Err(VarIntError::Truncated) };
        *pos += 1;
        result |= u64::from(byte & 0x7f).wrapping_shl(shift);
        if byte & 0x80 == 0 {
            return Ok(result);
        }
        shift += 7;
        if shift >= 70 {
            return Err(VarIntError::TooLong);
        }
    }
}

/// [`read_u32_with`] a byte at a time.
fn read_u32_bytewise(buf: &[u8], pos: &mut usize) -> Result<u32, VarIntError> {
    let mut result = 0u32;
    let mut shift = 0u32;
    loop {
        let Some(&byte) = buf.get(*pos) else { return Err(VarIntError::Truncated) };
        *pos += 1;
        result |= u32::from(byte & 0x7f).wrapping_shl(shift);
        if byte & 0x80 == 0 {
            return Ok(result);
        }
        shift += 7;
        if shift >= 35 {
            return Err(VarIntError::TooLong);
        }
    }
}

/// Writes `value` as unsigned LEB128 (used by tests and by tools that build streams).
pub fn write_u64(out: &mut Vec<u8>, mut value: u64) {
    loop {
        let byte = (value & 0x7f) as u8;
        value >>= 7;
        if value == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn u64_round_trips(v: u64) {
            let mut buf = Vec::new();
            write_u64(&mut buf, v);
            let mut pos = 0;
            prop_assert_eq!(read_u64(&buf, &mut pos), Ok(v));
            prop_assert_eq!(pos, buf.len());
        }

        #[test]
        fn u32_round_trips(v: u32) {
            let mut buf = Vec::new();
            write_u64(&mut buf, u64::from(v));
            let mut pos = 0;
            prop_assert_eq!(read_u32(&buf, &mut pos), Ok(v));
            prop_assert_eq!(pos, buf.len());
        }

        #[test]
        fn any_bytes_never_panic_nor_overrun(bytes: Vec<u8>, start in 0usize..16) {
            let mut pos = start.min(bytes.len());
            let before = pos;
            match read_u64(&bytes, &mut pos) {
                Ok(_) => prop_assert!(pos > before && pos <= bytes.len() && pos - before <= 10),
                Err(VarIntError::Truncated) => prop_assert!(bytes[before..].iter().all(|b| b & 0x80 != 0)),
                Err(VarIntError::TooLong) => prop_assert_eq!(pos - before, 10),
            }
            let mut pos = before;
            if read_u32(&bytes, &mut pos).is_ok() {
                prop_assert!(pos - before <= 5);
            }
        }

        /// The one-load decode gives what the byte loop gives (value or error, and position) on
        /// any bytes at any position.
        #[test]
        fn word_decode_agrees_with_the_byte_loop(bytes: Vec<u8>, start in 0usize..24, small in proptest::collection::vec(0u64..1 << 35, 1..4)) {
            // Random bytes rarely hold short numbers: follow them with some written ones.
            let mut bytes = bytes;
            for v in small {
                write_u64(&mut bytes, v);
            }
            let mut at = start.min(bytes.len());
            while at < bytes.len() {
                let (mut fast, mut slow) = (at, at);
                prop_assert_eq!(read_u64(&bytes, &mut fast), read_u64_bytewise(&bytes, &mut slow));
                prop_assert_eq!(fast, slow);
                let (mut fast, mut slow) = (at, at);
                prop_assert_eq!(read_u32(&bytes, &mut fast), read_u32_bytewise(&bytes, &mut slow));
                prop_assert_eq!(fast, slow);
                at += 1;
            }
        }

        /// `pext` squeezes any bits as the shifts do (on a CPU with BMI2, fast or not).
        #[cfg(target_arch = "x86_64")]
        #[test]
        fn pext_squeezes_as_the_shifts_do(bits: u64) {
            if std::arch::is_x86_feature_detected!("bmi2") {
                prop_assert_eq!(Pext::squeeze(bits), Shifts::squeeze(bits));
            }
        }

        #[test]
        fn truncated_varint_is_reported(v in 128u64.., cut in 1usize..9) {
            let mut buf = Vec::new();
            write_u64(&mut buf, v);
            let cut = cut.min(buf.len() - 1);
            let mut pos = 0;
            prop_assert_eq!(read_u64(&buf[..cut], &mut pos), Err(VarIntError::Truncated));
        }
    }

    #[test]
    fn known_encodings() {
        let mut pos = 0;
        assert_eq!(read_u32(&[0xff, 0xff, 0xff, 0xff, 0x0f], &mut pos), Ok(u32::MAX));
        let mut pos = 0;
        assert_eq!(read_u64(&[0x80, 0x01], &mut pos), Ok(128));
        let mut pos = 0;
        assert_eq!(read_u32(&[0x80; 6], &mut pos), Err(VarIntError::TooLong));
    }
}
