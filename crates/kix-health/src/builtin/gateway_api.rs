//! Gateway API (gateway.networking.k8s.io): classes and gateways report
//! `Accepted` (and `Programmed`); routes and policies report `Accepted` and
//! `ResolvedRefs` per parent (per ancestor for policies), written by each
//! controller that handles them.

use super::{Builtin, cond};

const GROUP: &str = "gateway.networking.k8s.io";

/// A condition observed for the object's current generation (or saying
/// nothing about it): a parent's entry left from an older generation is stale.
macro_rules! fresh {
    () => {
        "c.?observedGeneration.orValue(metadata.?generation.orValue(0)) >= metadata.?generation.orValue(0)"
    };
}

/// Some parent of the route has condition `$type` with status `$status`.
macro_rules! parent_cond {
    ($list:literal, $type:literal, $status:literal) => {
        concat!(
            "status.?",
            $list,
            ".orValue([]).exists(p, p.?conditions.orValue([]).exists(c, c.type == '",
            $type,
            "' && c.status == '",
            $status,
            "'))"
        )
    };
}

/// Every parent with current conditions accepted it, its refs resolved
/// and (where reported) it is programmed.
macro_rules! route_current {
    ($list:literal) => {
        concat!(
            "status.?",
            $list,
            ".orValue([]).filter(p, p.?conditions.orValue([]).exists(c, ",
            fresh!(),
            ")).map(p, p.conditions.filter(c, ",
            fresh!(),
            ")).exists(cs, true) && status.",
            $list,
            ".filter(p, p.?conditions.orValue([]).exists(c, ",
            fresh!(),
            ")).all(p, p.conditions.exists(c, c.type == 'Accepted' && c.status == 'True' && ",
            fresh!(),
            ") && !p.conditions.exists(c, c.type in ['ResolvedRefs', 'Programmed'] && c.status != 'True' && ",
            fresh!(),
            "))"
        )
    };
}

/// A parent refused it, or a reference does not resolve. `Accepted=False`
/// with reason `Pending` is a controller that has not decided yet.
macro_rules! route_failed {
    ($list:literal) => {
        concat!(
            "status.?",
            $list,
            ".orValue([]).exists(p, p.?conditions.orValue([]).exists(c, ",
            fresh!(),
            " && ((c.type == 'Accepted' && c.status == 'False' && c.?reason.orValue('') != 'Pending')",
            " || (c.type == 'ResolvedRefs' && c.status == 'False'))))"
        )
    };
}

macro_rules! route {
    ($kind:literal) => {
        Builtin::new("gateway-api", GROUP, $kind)
            .current(route_current!("parents"))
            .failed(route_failed!("parents"))
    };
}

macro_rules! policy {
    ($kind:literal) => {
        Builtin::new("gateway-api", GROUP, $kind)
            .current(route_current!("ancestors"))
            .failed(route_failed!("ancestors"))
    };
}

pub(super) const RULES: &[Builtin] = &[
    Builtin::new("gateway-api", GROUP, "GatewayClass")
        .current(concat!(
            "status.?conditions.orValue([]).exists(c, c.type == 'Accepted' && c.status == 'True' && ",
            fresh!(),
            ")"
        ))
        .failed(cond!("Accepted", "False")),
    // Accepted and Programmed; a listener whose refs do not resolve or that
    // is not accepted fails the gateway.
    Builtin::new("gateway-api", GROUP, "Gateway")
        .current(concat!(
            cond!("Accepted", "True"),
            " && ",
            cond!("Programmed", "True")
        ))
        .failed(concat!(
            "status.?conditions.orValue([]).exists(c, (c.type == 'Accepted' && c.status == 'False' && c.?reason.orValue('') != 'Pending')",
            " || (c.type == 'Programmed' && c.status == 'False' && c.?reason.orValue('') in ['Invalid', 'NoResources']))",
            " || ",
            cond!("ResolvedRefs", "False"),
            " || ",
            parent_cond!("listeners", "ResolvedRefs", "False"),
            " || ",
            parent_cond!("listeners", "Accepted", "False")
        )),
    route!("HTTPRoute"),
    route!("GRPCRoute"),
    route!("TLSRoute"),
    route!("TCPRoute"),
    route!("UDPRoute"),
    policy!("BackendTLSPolicy"),
];
