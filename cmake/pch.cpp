// Translation unit that carries the shared precompiled header (see cmake/pch.h).
