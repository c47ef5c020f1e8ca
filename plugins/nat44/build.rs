fn main() {
    sluice_api_schema::rust::build(&["api/nat44.api"]);
}
