//! The `cfg` conditions the crate repeats, each written once under a name (tokio's `cfg_*!`):
//! a macro that keeps the items it wraps only where its condition holds, and its `cfg_not_*!`
//! twin for the other targets.

/// Where producers read the TSC (`clock`'s fast clock): Linux on x86-64, not under loom.
macro_rules! cfg_tsc {
    ($($item:item)*) => {
        $(
            #[cfg(all(not(loom), target_os = "linux", target_arch = "x86_64"))]
            $item
        )*
    };
}

/// Where `cfg_tsc!` does not hold.
macro_rules! cfg_not_tsc {
    ($($item:item)*) => {
        $(
            #[cfg(not(all(not(loom), target_os = "linux", target_arch = "x86_64")))]
            $item
        )*
    };
}
