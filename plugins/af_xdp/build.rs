fn main() {
    sluice_api_schema::rust::build(&["api/af_xdp.api"]);
}
