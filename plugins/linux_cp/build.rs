fn main() {
    sluice_api_schema::rust::build(&["api/lcp.api"]);
}
