fn main() {
    sluice_api_schema::rust::build(&[
        "api/vxlan.api",
        "api/gre.api",
        "api/ipip.api",
        "api/gtpu.api",
        "api/sr.api",
    ]);
}
