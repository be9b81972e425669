//! `hint` on x86-64: `prefetchw`, where CPUID reports it.
//! Compiled where `cfg_prefetch!` holds.

use crate::sync::AtomicU8;
use std::sync::atomic::Ordering;

/// How far ahead of the next write [`WriteAhead::ahead`] asks for: four cache lines, so
/// the line is owned before the producer reaches it at tens of nanoseconds a call.
const AHEAD_BYTES: usize = 256;

/// Proof that this CPU has `prefetchw`: a caller asks for the lines of several vectors
/// ([`WriteAhead::ahead`]) with one look at the cached CPUID answer. Only a hint: it changes no
/// memory and no result. There is none on CPUs without `prefetchw`, on other architectures,
/// and under loom, Miri and SGX (no inline assembly or no CPUID there).
#[derive(Clone, Copy, Debug)]
pub(crate) struct WriteAhead(());

impl WriteAhead {
    /// `Some` where the CPU has `prefetchw`.
    #[inline(always)]
    pub(crate) fn get() -> Option<WriteAhead> {
        has_prefetchw().then_some(WriteAhead(()))
    }

    /// Asks the CPU to fetch, for writing, the cache line `AHEAD_BYTES` past where `vec`'s
    /// next push goes, if that is still inside its buffer.
    #[inline(always)]
    pub(crate) fn ahead<T>(self, vec: &Vec<T>) {
        let size = std::mem::size_of::<T>();
        if size == 0 {
            return;
        }
        let ahead = vec.len() + AHEAD_BYTES.div_ceil(size);
        if ahead < vec.capacity() {
            let addr = vec.as_ptr().wrapping_add(ahead);
            // SAFETY: `prefetchw` is a hint: it neither reads nor writes memory as the program
            // sees it and never faults, whatever the address; the address is inside `vec`'s
            // buffer all the same. `self` exists only where CPUID reports it (`prfchw`), so it
            // cannot be an undefined opcode. It uses no stack and leaves the flags as they
            // were, as the options say.
            unsafe {
                std::arch::asm!(
                    "prefetchw [{addr}]",
                    addr = in(reg) addr,
                    options(nostack, preserves_flags, readonly)
                );
            }
        }
    }
}

/// Whether this CPU has `prefetchw`: CPUID once, then a cached answer (0 not asked yet, 1
/// no, 2 yes). Every x86-64 CPU of AMD has it, Intel's from Broadwell on.
#[inline(always)]
fn has_prefetchw() -> bool {
    static ANSWER: AtomicU8 = AtomicU8::new(0);
    // Relaxed: the answer is the same whichever thread computes it, and nothing else is
    // published with it.
    match ANSWER.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: CPUID exists on every x86-64 CPU and only reads identification
            // registers (an `unsafe` call before Rust 1.89, a safe one after).
            #[allow(unused_unsafe)]
            let ids = unsafe { std::arch::x86_64::__cpuid(0x8000_0001) };
            // ECX bit 8: PRFCHW (3DNowPrefetch), the `prefetchw` instruction.
            let has = ids.ecx & (1 << 8) != 0;
            ANSWER.store(if has { 2 } else { 1 }, Ordering::Relaxed);
            has
        }
        answer => answer == 2,
    }
}
