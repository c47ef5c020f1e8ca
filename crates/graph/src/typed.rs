//! Named next arcs and counters: per node an enum, declared once with its target nodes (or
//! counter names and descriptions), used at the registration (`.nexts(E::NAMES)`,
//! `.counters(C::DESCS)`) and at every call site (`E::Lookup.into()`, `cx.count(C::Seen, 1)`,
//! `cx.error(C::Bad)`), so an arc index can neither drift from its name nor be undeclared.
//!
//! ```
//! use sluice_graph::{arcs, counters, Next};
//! arcs! {
//!     /// `my-node`'s next arcs.
//!     pub enum MyNext {
//!         /// Malformed packets.
//!         Drop => "error-drop",
//!         /// Everything else.
//!         Out => "interface-output",
//!     }
//! }
//! counters! {
//!     /// `my-node`'s counters.
//!     pub enum MyCounter {
//!         /// Packets passed on.
//!         Seen => info("seen", "packets seen"),
//!         /// Packets dropped.
//!         Bad => error("bad", "bad packets"),
//!     }
//! }
//! assert_eq!(MyNext::NAMES, ["error-drop", "interface-output"]);
//! assert_eq!(Next::from(MyNext::Out), Next(1));
//! assert_eq!(MyCounter::DESCS[1].name, "bad");
//! // Targets that differ by instance (one node registered per address family):
//! arcs! {
//!     /// `ip4-my-node`'s / `ip6-my-node`'s next arcs.
//!     pub enum FamilyNext<lookup> {
//!         /// Malformed packets.
//!         Drop => "error-drop",
//!         /// The family's lookup node.
//!         Lookup => lookup,
//!     }
//! }
//! assert_eq!(FamilyNext::names("ip6-lookup"), ["error-drop", "ip6-lookup"]);
//! ```

/// A node counter's position in its node's counter list: what [`crate::Cx::count`] and
/// [`crate::Cx::error`] take. Implemented by the enums [`counters!`](crate::counters)
/// generates.
pub trait CounterId: Copy {
    /// The position.
    fn index(self) -> usize;
}

/// Declares a node's next arcs as an enum: each variant names its target node; generates
/// `NAMES` (for `NodeRegistration::nexts`) and `From<Enum> for Next`. See the module doc.
#[macro_export]
macro_rules! arcs {
    ($(#[$m:meta])* $vis:vis enum $name:ident {
        $($(#[$vm:meta])* $var:ident => $target:expr),+ $(,)?
    }) => {
        $(#[$m])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq)]
        #[repr(u16)]
        $vis enum $name {
            $($(#[$vm])* $var),+
        }
        impl $name {
            /// Target node of each arc, in arc order (for `NodeRegistration::nexts`).
            pub const NAMES: &'static [&'static str] = &[$($target),+];
            /// The arc as a [`Next`]($crate::Next).
            #[inline(always)]
            pub const fn next(self) -> $crate::Next {
                $crate::Next(self as u16)
            }
        }
        impl ::core::convert::From<$name> for $crate::Next {
            #[inline(always)]
            fn from(a: $name) -> $crate::Next {
                $crate::Next(a as u16)
            }
        }
    };
    // A node registered once per instance (per address family, per feature arc) whose
    // targets differ by instance: `enum E<lookup> { Drop => "error-drop", Lookup => lookup }`
    // generates `E::names(lookup)` instead of `NAMES`.
    ($(#[$m:meta])* $vis:vis enum $name:ident < $($p:ident),+ > {
        $($(#[$vm:meta])* $var:ident => $target:expr),+ $(,)?
    }) => {
        $(#[$m])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq)]
        #[repr(u16)]
        $vis enum $name {
            $($(#[$vm])* $var),+
        }
        impl $name {
            /// Target node of each arc, in arc order (for `NodeRegistration::nexts`), with
            /// this instance's targets.
            pub fn names<'a>($($p: &'a str),+) -> ::std::vec::Vec<&'a str> {
                ::std::vec![$($target),+]
            }
            /// The arc as a [`Next`]($crate::Next).
            #[inline(always)]
            pub const fn next(self) -> $crate::Next {
                $crate::Next(self as u16)
            }
        }
        impl ::core::convert::From<$name> for $crate::Next {
            #[inline(always)]
            fn from(a: $name) -> $crate::Next {
                $crate::Next(a as u16)
            }
        }
    };
}

/// Declares a node's counters as an enum: each variant with `info(..)`, `warn(..)` or
/// `error(..)` and its symbolic name and description; generates `DESCS` (for
/// `NodeRegistration::counters`) and [`CounterId`]. See the module doc.
#[macro_export]
macro_rules! counters {
    ($(#[$m:meta])* $vis:vis enum $name:ident {
        $($(#[$vm:meta])* $var:ident => $sev:ident($cname:expr, $desc:expr)),+ $(,)?
    }) => {
        $(#[$m])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq)]
        #[repr(u16)]
        $vis enum $name {
            $($(#[$vm])* $var),+
        }
        impl $name {
            /// Every counter, in order (for `NodeRegistration::counters`).
            pub const DESCS: &'static [$crate::CounterDesc] =
                &[$($crate::CounterDesc::$sev($cname, $desc)),+];
            /// Every counter, in the same order (for per-counter tallies kept in arrays).
            pub const ALL: &'static [Self] = &[$(Self::$var),+];
        }
        impl $crate::CounterId for $name {
            #[inline(always)]
            fn index(self) -> usize {
                self as usize
            }
        }
    };
}
