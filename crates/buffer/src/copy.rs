//! Short copies inline: a node writing a packet of a few dozen bytes per packet (`pg-input`).
//! The tunnels' `copy_rewrite` (plugins/tunnels) is a twin kept for 1-2 instructions a
//! packet of their encap nodes (docs/benchmarking.md, round 2, fourteenth step).

/// The longest copy [`copy_small`] does.
pub const COPY_SMALL_MAX: usize = 128;

/// Copies `src` into the start of `dst` inline, for a `src` of at most [`COPY_SMALL_MAX`]
/// bytes: as two overlapping fixed-size copies, its first and its last `K` bytes, `K` the
/// largest of 64, 32, 16, 8, 4 and 2 not above its length (one byte or none below 2). That is
/// what `memcpy` does for small sizes, without its call, its length dispatch and the registers
/// the call makes a node's loop spill. False, having copied nothing: `src` longer than
/// [`COPY_SMALL_MAX`] or than `dst`.
#[inline(always)]
pub fn copy_small(dst: &mut [u8], src: &[u8]) -> bool {
    let n = src.len();
    if n > COPY_SMALL_MAX {
        return false;
    }
    let Some(d) = dst.get_mut(..n) else {
        return false;
    };
    // Longest first: packets and IP tunnel rewrites are 20 bytes or more. (`K < n`, a
    // 64-byte packet as two 32-byte copies, not one 64-byte copy twice, cost pg-input 1.9
    // and the GRE encap 5 instructions a packet: the compiler's code around it got worse.)
    if n >= 32 {
        if n >= 64 {
            two::<64>(d, src)
        } else {
            two::<32>(d, src)
        }
    } else if n >= 16 {
        two::<16>(d, src)
    } else if n >= 8 {
        two::<8>(d, src)
    } else if n >= 4 {
        two::<4>(d, src)
    } else if n >= 2 {
        two::<2>(d, src)
    } else if let (Some(d), Some(&s)) = (d.first_mut(), src.first()) {
        *d = s;
    }
    true
}

/// `s` into `d` (as long) as its first and its last `K` bytes: for `K <= s.len() <= 2 * K`
/// (the caller's tests, which let the compiler drop the checks below).
#[inline(always)]
fn two<const K: usize>(d: &mut [u8], s: &[u8]) {
    debug_assert!(d.len() == s.len() && (K..=2 * K).contains(&s.len()));
    if let (Some(a), Some(b)) = (s.first_chunk::<K>(), s.last_chunk::<K>()) {
        if let Some(da) = d.first_chunk_mut::<K>() {
            *da = *a;
        }
        if let Some(db) = d.last_chunk_mut::<K>() {
            *db = *b;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + len + 1) as u8).collect()
    }

    /// Every length up to one past the limit, into areas one short, exact, one long and
    /// of the limit's size and one more: copied exactly when it fits, and nothing written
    /// past the copy (or at all when refused).
    #[test]
    fn copies_every_length_or_nothing() {
        for len in 0..=COPY_SMALL_MAX + 1 {
            let s = src(len);
            let areas = [
                len.saturating_sub(1),
                len,
                len + 1,
                COPY_SMALL_MAX,
                COPY_SMALL_MAX + 1,
            ];
            for area in areas {
                let mut d = vec![0xeeu8; area];
                let fits = len <= area && len <= COPY_SMALL_MAX;
                assert_eq!(copy_small(&mut d, &s), fits, "len {len}, area {area}");
                let (head, rest) = d.split_at(if fits { len } else { 0 });
                if fits {
                    assert_eq!(head, &s[..], "len {len}, area {area}");
                }
                assert!(rest.iter().all(|&x| x == 0xee), "len {len}, area {area}");
            }
        }
    }

    /// The boundaries of the copy sizes: the last length of one size and the first of the
    /// next, with every byte distinct, so a gap or an overlap in the wrong place shows.
    #[test]
    fn boundaries_of_the_copy_sizes() {
        for k in [1usize, 2, 4, 8, 16, 32, 64, 128] {
            for len in [k - 1, k, k + 1, 2 * k - 1, 2 * k] {
                let s: Vec<u8> = (0..len).map(|i| i as u8 ^ 0x5a).collect();
                let mut d = [0u8; 2 * COPY_SMALL_MAX];
                let fits = len <= COPY_SMALL_MAX;
                assert_eq!(copy_small(&mut d, &s), fits, "len {len}");
                if fits {
                    assert_eq!(&d[..len], &s[..], "len {len}");
                }
                let from = if fits { len } else { 0 };
                assert!(d[from..].iter().all(|&x| x == 0), "len {len}");
            }
        }
    }
}
