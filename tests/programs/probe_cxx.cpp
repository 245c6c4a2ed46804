// SPDX-License-Identifier: GPL-2.0-or-later
//
// C++ functions that `cannoli probe` names by their qualified names
// (`geo::scale`, `geo::Box::area`), as `perf probe` and SystemTap take
// them, rather than by their mangled symbols. Built by the probe tests
// with the host's g++ (Debian 12's only C++ compiler): x86_64.
//
//   probe_cxx    prints "area=A scale=S": the method's result and the
//                function's, whose arguments are A and 3
#include <cstdio>

namespace geo {

struct Box {
    long w, h;
    __attribute__((noinline)) long area() const { return w * h; }
};

__attribute__((noinline)) long scale(long v, int k)
{
    return v * k;
}

} // namespace geo

int main(int argc, char **argv)
{
    (void)argv;
    geo::Box b{argc + 2, 7};
    long a = b.area();
    long s = geo::scale(a, 3);
    std::printf("area=%ld scale=%ld\n", a, s);
    return 0;
}
