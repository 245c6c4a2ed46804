// SPDX-License-Identifier: GPL-2.0-or-later
//
// heapcxx: planted heap bugs through C++ new and delete, one per run by
// argv[1], for the `cannoli heap` tests on x86_64 (the only guest Debian
// 12 has a C++ cross compiler for: the test builds it with the host's g++,
// dynamically linked, so that memcheck replaces operator new too):
//
//   uaf        a member read after `delete`
//   overflow   one element past a `new[]` array, written
//   leak       a `new` object whose last pointer is dropped
//
// The functions are extern "C" and named hb_* as in heapbugs.c, so both
// memcheck and cannoli name them the same way (no mangling).
#include <cstdio>
#include <cstring>

#define HB __attribute__((noinline))
#define BARRIER() __asm__ volatile("" ::: "memory")

struct Node {
    long value;
    Node *next;
    char tag[40];
};

static void *volatile launder_slot;
static volatile int sink;

extern "C" {

HB void *hb_cxx_launder(void *p)
{
    launder_slot = p;
    return launder_slot;
}

HB void hb_cxx_uaf(void)
{
    Node *n = new Node();
    n->value = 7;
    volatile Node *q = static_cast<Node *>(hb_cxx_launder(n));
    delete n;
    sink = static_cast<int>(q->value);
    BARRIER();
}

HB void hb_cxx_overflow(void)
{
    int *a = new int[10];
    for (int i = 0; i < 10; i++)
        a[i] = i;
    volatile int *q = static_cast<int *>(hb_cxx_launder(a));
    q[10 + static_cast<int>(sink)] = 1;
    BARRIER();
    delete[] a;
}

HB void hb_cxx_leak(void)
{
    Node *n = new Node();
    hb_cxx_launder(n);
    launder_slot = nullptr;
    BARRIER();
}
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        std::puts("uaf\noverflow\nleak");
        return 0;
    }
    std::printf("%s\n", argv[1]);
    if (!std::strcmp(argv[1], "uaf"))
        hb_cxx_uaf();
    else if (!std::strcmp(argv[1], "overflow"))
        hb_cxx_overflow();
    else if (!std::strcmp(argv[1], "leak"))
        hb_cxx_leak();
    else
        return 2;
    return 0;
}
