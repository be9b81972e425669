//! The `cfg_*!` macros (as tokio's): each repeated `cfg` condition written once, with a
//! `cfg_not_*!` twin. Imports nothing.

/// Where producers read the TSC (`clock`'s fast clock): Linux on x86-64, not under loom.
macro_rules! cfg_tsc {
    ($($item:item)*) => {
        $(
            #[cfg(all(not(loom), target_os = "linux", target_arch = "x86_64"))]
            $item
        )*
    };
}

macro_rules! cfg_not_tsc {
    ($($item:item)*) => {
        $(
            #[cfg(not(all(not(loom), target_os = "linux", target_arch = "x86_64")))]
            $item
        )*
    };
}
