"""The sandbox stack file, shipped as package data (tau sandbox up reads it)."""
