"""This machine's processes and ports, for what TauGrid starts on it: the local backend's runs,
the local Ray head, Ray Serve's proxy, and the sandbox's control plane and nodes. Stdlib only;
the bottom layer beside `api` (no other taugrid package is imported here)."""
