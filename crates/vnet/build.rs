fn main() {
    sluice_api_schema::rust::build(&[
        "api/interface.api",
        "api/ip.api",
        "api/l2.api",
        "api/pg.api",
        "api/trace.api",
    ]);
}
