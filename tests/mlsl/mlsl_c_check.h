/*
 * What the parts of mlsl_c_check share: mlsl_c_check.c (the environment, argument errors, main
 * and the helpers declared here), mlsl_c_collectives.c (every Distribution collective) and
 * mlsl_c_model.c (the model chain). C99 over mlsl.h alone, like the whole check.
 */
#ifndef NODECOMM_TESTS_MLSL_C_CHECK_H
#define NODECOMM_TESTS_MLSL_C_CHECK_H

#include <mlsl.h>
#include <stddef.h>

/* The process's state, set by main (defined in mlsl_c_check.c). */
extern mlsl_environment env;
extern int rank;
extern int world;
extern long checks;
extern long failures;

/* What the macros below count with: ok_ and refused_ count a check, failf a failure (printed
 * with the line it was found on). */
void failf(int line, const char* fmt, ...);
int ok_(int status, const char* call, int line);
int refused_(int status, const char* call, int line);

/* A call that must succeed; a call that must be refused as an argument error. */
#define OK(call) ok_((call), #call, __LINE__)
#define REFUSED(call) refused_((call), #call, __LINE__)
#define EXPECT_EQ(what, got, want)                                                        \
  do {                                                                                    \
    unsigned long long got_ = (unsigned long long)(got);                                  \
    unsigned long long want_ = (unsigned long long)(want);                                \
    checks++;                                                                             \
    if (got_ != want_) failf(__LINE__, "%s: got %llu, expected %llu", what, got_, want_); \
  } while (0)
#define EXPECT(cond, ...)                      \
  do {                                         \
    checks++;                                  \
    if (!(cond)) failf(__LINE__, __VA_ARGS__); \
  } while (0)

/* ---- buffers of any data type (mlsl_c_check.c) ---- */

size_t dt_size(mlsl_data_type dt);
void put_at(void* buf, mlsl_data_type dt, size_t i, double v);
void* buf_new(int lib, size_t bytes);
void buf_free(int lib, void* p);
void expect_elems(int line, const char* what, const void* buf, mlsl_data_type dt, const double* ref,
                  size_t n);
double* ref_new(size_t n);

/* ---- the group layout (docs/MLSL.md "Process groups"), computed independently ---- */

#define MAX_GROUP 64

typedef struct {
  size_t n;              /* group size */
  size_t k;              /* this process's index in it */
  int member[MAX_GROUP]; /* global ranks by group index */
} group_t;

group_t grid_group(int g, int p, int d, int m, mlsl_group_type gt);

/* ---- the parts main runs ---- */

/* mlsl_c_collectives.c */
void check_group_indices(mlsl_distribution dist, int d, int m);
void check_collectives(mlsl_distribution dist, int d, int m);
void check_bytes(mlsl_distribution dist);
void check_colors(void);

/* mlsl_c_model.c */
void run_chain(mlsl_distribution dist, int d, int m, int du, int lib);

#endif /* NODECOMM_TESTS_MLSL_C_CHECK_H */
