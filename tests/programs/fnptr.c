/* SPDX-License-Identifier: GPL-2.0-or-later
 *
 * fnptr: indirect calls through a dispatch table (a tiny bytecode VM),
 * a vtable-style struct of function pointers, callbacks, and computed
 * selection of handlers.
 */
#include <stdint.h>
#include <stdio.h>

#define NOINLINE __attribute__((noinline))

/* ---- a tiny stack VM dispatched through a table of handlers ---------- */

enum { OP_PUSH, OP_ADD, OP_SUB, OP_MUL, OP_DUP, OP_SWAP, OP_JNZ, OP_DEC,
       OP_POP, OP_HALT, OP_COUNT };

struct vm {
    int32_t stack[32];
    int sp;
    int pc;
    const int32_t *code;
    int running;
    uint32_t steps;
};

typedef void (*op_fn)(struct vm *);

static NOINLINE void op_push(struct vm *m) { m->stack[m->sp++] = m->code[m->pc++]; }
static NOINLINE void op_add(struct vm *m) { m->sp--; m->stack[m->sp - 1] += m->stack[m->sp]; }
static NOINLINE void op_sub(struct vm *m) { m->sp--; m->stack[m->sp - 1] -= m->stack[m->sp]; }
static NOINLINE void op_mul(struct vm *m) { m->sp--; m->stack[m->sp - 1] *= m->stack[m->sp]; }
static NOINLINE void op_dup(struct vm *m) { m->stack[m->sp] = m->stack[m->sp - 1]; m->sp++; }
static NOINLINE void op_swap(struct vm *m)
{
    int32_t t = m->stack[m->sp - 1];
    m->stack[m->sp - 1] = m->stack[m->sp - 2];
    m->stack[m->sp - 2] = t;
}
static NOINLINE void op_jnz(struct vm *m)
{
    int32_t target = m->code[m->pc++];
    if (m->stack[m->sp - 1] != 0)
        m->pc = target;
}
static NOINLINE void op_dec(struct vm *m) { m->stack[m->sp - 1]--; }
static NOINLINE void op_pop(struct vm *m) { m->sp--; }
static NOINLINE void op_halt(struct vm *m) { m->running = 0; }

static op_fn const dispatch[OP_COUNT] = {
    op_push, op_add, op_sub, op_mul, op_dup, op_swap, op_jnz, op_dec, op_pop, op_halt,
};

static NOINLINE int32_t vm_run(const int32_t *code)
{
    struct vm m = { .sp = 0, .pc = 0, .code = code, .running = 1, .steps = 0 };
    while (m.running) {
        int32_t op = code[m.pc++];
        dispatch[op](&m);
        m.steps++;
    }
    return m.stack[m.sp - 1] + (int32_t)m.steps;
}

/* acc = 1; n = 9; do { acc = acc * 3; (shuffle) } while (--n); -> acc = 3^9 */
static const int32_t program[] = {
    OP_PUSH, 1,         /* acc */
    OP_PUSH, 9,         /* acc n */
    /* loop @4: */
    OP_SWAP,            /* n acc */
    OP_PUSH, 3, OP_MUL, /* n acc*3 */
    OP_SWAP,            /* acc*3 n */
    OP_DUP,             /* acc*3 n n */
    OP_PUSH, 0, OP_ADD, /* acc*3 n n */
    OP_SWAP,            /* acc*3 n n -> same shape */
    OP_POP,             /* acc*3 n */
    OP_SWAP,            /* n acc*3 */
    OP_PUSH, 0, OP_SUB, /* n acc*3 */
    OP_SWAP,            /* acc*3 n */
    OP_DEC,             /* acc*3 n-1 */
    OP_JNZ, 4,
    OP_POP,
    OP_HALT,
};

/* ---- a vtable of shapes ----------------------------------------------- */

struct shape;
struct shape_ops {
    int64_t (*area)(const struct shape *);
    int64_t (*perimeter)(const struct shape *);
    const char *name;
};
struct shape {
    const struct shape_ops *ops;
    int32_t a, b;
};

static NOINLINE int64_t rect_area(const struct shape *s) { return (int64_t)s->a * s->b; }
static NOINLINE int64_t rect_perim(const struct shape *s) { return 2 * ((int64_t)s->a + s->b); }
static NOINLINE int64_t sq_area(const struct shape *s) { return (int64_t)s->a * s->a; }
static NOINLINE int64_t sq_perim(const struct shape *s) { return 4 * (int64_t)s->a; }
static NOINLINE int64_t tri_area(const struct shape *s) { return (int64_t)s->a * s->b / 2; }
static NOINLINE int64_t tri_perim(const struct shape *s) { return 3 * ((int64_t)s->a + s->b) / 2; }

static const struct shape_ops rect_ops = { rect_area, rect_perim, "rect" };
static const struct shape_ops sq_ops = { sq_area, sq_perim, "square" };
static const struct shape_ops tri_ops = { tri_area, tri_perim, "triangle" };

/* ---- callbacks ---------------------------------------------------------- */

typedef uint32_t (*fold_fn)(uint32_t acc, uint32_t x);

static NOINLINE uint32_t f_sum(uint32_t acc, uint32_t x) { return acc + x; }
static NOINLINE uint32_t f_xor(uint32_t acc, uint32_t x) { return acc ^ (x * 0x9e3779b1u); }
static NOINLINE uint32_t f_max(uint32_t acc, uint32_t x) { return x > acc ? x : acc; }
static NOINLINE uint32_t f_hash(uint32_t acc, uint32_t x) { return (acc ^ x) * 16777619u; }

static NOINLINE uint32_t fold(const uint32_t *v, int n, uint32_t init, fold_fn f)
{
    uint32_t acc = init;
    for (int i = 0; i < n; i++)
        acc = f(acc, v[i]);
    return acc;
}

/* The pointer lives in memory so the call cannot be devirtualised. */
static fold_fn volatile chosen;

int main(void)
{
    static const fold_fn folds[] = { f_sum, f_xor, f_max, f_hash };
    static const char *const fold_names[] = { "sum", "xor", "max", "hash" };
    uint32_t data[64];
    struct shape shapes[12];
    const struct shape_ops *const kinds[] = { &rect_ops, &sq_ops, &tri_ops };
    int64_t total_area = 0, total_perim = 0;
    int32_t vm_result = 0;

    for (int i = 0; i < 64; i++)
        data[i] = (uint32_t)(i * 2654435761u) >> 7;

    for (int r = 0; r < 200; r++)
        vm_result += vm_run(program);

    for (int i = 0; i < 12; i++) {
        shapes[i].ops = kinds[i % 3];
        shapes[i].a = 3 + i;
        shapes[i].b = 5 + 2 * i;
    }
    for (int r = 0; r < 100; r++)
        for (int i = 0; i < 12; i++) {
            total_area += shapes[i].ops->area(&shapes[i]);
            total_perim += shapes[i].ops->perimeter(&shapes[i]);
        }

    printf("vm x200       %d\n", vm_result);
    printf("shapes area   %lld perim %lld\n", (long long)total_area,
           (long long)total_perim);
    for (int i = 0; i < 12; i += 5)
        printf("shape %2d %-8s area %lld\n", i, shapes[i].ops->name,
               (long long)shapes[i].ops->area(&shapes[i]));
    for (int k = 0; k < 4; k++) {
        chosen = folds[k];
        printf("fold %-4s     %08x\n", fold_names[k], fold(data, 64, 1, chosen));
    }
    return 0;
}
