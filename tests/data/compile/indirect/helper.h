#pragma once
// An innocent-looking helper header.

#include <dlfcn.h>

inline int helper_value() { return 0; }
