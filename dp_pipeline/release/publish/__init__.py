"""Publishing a release: outputs written to a hidden folder, the manifest last,
then the folder made visible."""
