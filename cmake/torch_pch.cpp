// Translation unit that owns the shared precompiled libtorch header.
