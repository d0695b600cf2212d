/*
 * mlsl_c_check's model chain (mlsl_c_check.h): two CC operations with one parameter set each,
 * distributed update off and on, library and user buffers; activations, gradients, parameters
 * and statistics through mlsl.h checked against references computed here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlsl_c_check.h"

/* ---- the model chain: op0 (CC) -> op1 (CC), docs/MLSL.md "Activation exchanges" ---- */

enum { FIN0 = 4, F0 = 8, F1 = 8, F2 = 4, FM = 3, K0 = 10, KS0 = 3, K1 = 7, KS1 = 2, ITERS = 2 };

/* What producer model member m writes at global (minibatch, feature map, space): the consumer
 * must see the sum over the model group. */
static double fwd_val(size_t mb, size_t fm, size_t s, int it, size_t m) {
  return (double)(((mb * F0 + fm) * FM + s + (size_t)it * 5) % 53 + 1) * (double)(m + 1);
}

/* The gradient the consumer sends back for its input at global coordinates. */
static double bwd_val(size_t mb, size_t fm, size_t s, int it) {
  return (double)(((mb * F1 + fm) * FM + s + (size_t)it * 7) % 59 + 2);
}

/* Gradient element e (of the local, padded kernels) on the process with data index d. */
static double grad_val(size_t global_elem, size_t d) {
  return (double)(global_elem % 23 + 1 + d * 2);
}

/* Parameter element after update `it`: depends only on its global position. */
static double param_val(size_t global_elem, int it) {
  return (double)((global_elem * 5 + (size_t)it * 3) % 31 + 1);
}

typedef struct {
  mlsl_operation op;
  mlsl_activation in, out;
  mlsl_parameter_set ps;
  size_t kernels, ks; /* registered */
  mlsl_data_type pdt;
  size_t local, owned, owned_off, global_off; /* expected partition */
  void *grad, *params;                        /* local x ks elements */
  int du;
} layer_t;

typedef struct {
  int du, lib, use_test, link_next;
  int d, m;      /* distribution (D x M) */
  size_t di, mi; /* this process's data / model index */
  size_t gmb, mb, mb_off;
  mlsl_distribution dist;
  mlsl_session session;
  layer_t layer[2];
  char name[96];
} chain_t;

static void check_block_getters(const chain_t* ch, mlsl_comm_block_info b, const char* what) {
  mlsl_data_type dt = DT_BYTE;
  size_t fs = 0;
  char text[160];
  if (OK(mlsl_comm_block_info_get_data_type(b, &dt))) {
    snprintf(text, sizeof text, "%s: %s block data type", ch->name, what);
    EXPECT_EQ(text, dt, DT_FLOAT);
  }
  if (OK(mlsl_comm_block_info_get_fm_size(b, &fs))) {
    snprintf(text, sizeof text, "%s: %s block fm size", ch->name, what);
    EXPECT_EQ(text, fs, FM);
  }
}

/* Copies between a local tile ([mb][local fm][space]) and a comm buffer through the block
 * list: the only geometry a program may rely on. pack != 0: tile -> buffer. */
static void move_blocks(const chain_t* ch, mlsl_activation act, int pack, float* tile,
                        size_t local_fm, float* buf) {
  size_t nb = 0, b;
  if (!OK(pack ? mlsl_activation_get_pack_block_count(act, &nb)
               : mlsl_activation_get_unpack_block_count(act, &nb)))
    return;
  for (b = 0; b < nb; b++) {
    mlsl_comm_block_info info = 0;
    size_t mbo = 0, mbc = 0, fmo = 0, fmc = 0, fms = 0, off = 0, mb, fm, s;
    if (!OK(pack ? mlsl_activation_get_pack_block(act, b, &info)
                 : mlsl_activation_get_unpack_block(act, b, &info)))
      return;
    if (!OK(mlsl_comm_block_info_get_mb_offset(info, &mbo)) ||
        !OK(mlsl_comm_block_info_get_mb_count(info, &mbc)) ||
        !OK(mlsl_comm_block_info_get_fm_offset(info, &fmo)) ||
        !OK(mlsl_comm_block_info_get_fm_count(info, &fmc)) ||
        !OK(mlsl_comm_block_info_get_fm_size(info, &fms)) ||
        !OK(mlsl_comm_block_info_get_buf_offset(info, &off)))
      return;
    if (b == 0) check_block_getters(ch, info, pack ? "pack" : "unpack");
    EXPECT(mbo + mbc <= ch->mb && fmo + fmc <= local_fm && fms == FM,
           "%s: block %zu (mb %zu+%zu, fm %zu+%zu, size %zu) outside the %zux%zux%d tile", ch->name,
           b, mbo, mbc, fmo, fmc, fms, ch->mb, local_fm, FM);
    if (mbo + mbc > ch->mb || fmo + fmc > local_fm || fms != FM) return;
    for (mb = 0; mb < mbc; mb++) {
      for (fm = 0; fm < fmc; fm++) {
        for (s = 0; s < fms; s++) {
          float* t = &tile[((mbo + mb) * local_fm + fmo + fm) * FM + s];
          float* c = &buf[off + (mb * fmc + fm) * fms + s];
          if (pack)
            *c = *t;
          else
            *t = *c;
        }
      }
    }
  }
}

static void check_activation_getters(const chain_t* ch, mlsl_activation act, const char* what,
                                     size_t global_fm, size_t local_fm, size_t fm_off) {
  size_t v = 0;
  mlsl_data_type dt = DT_BYTE;
  char text[160];
  snprintf(text, sizeof text, "%s: %s global fm count", ch->name, what);
  if (OK(mlsl_activation_get_global_fm_count(act, &v))) EXPECT_EQ(text, v, global_fm);
  snprintf(text, sizeof text, "%s: %s local fm count", ch->name, what);
  if (OK(mlsl_activation_get_local_fm_count(act, &v))) EXPECT_EQ(text, v, local_fm);
  snprintf(text, sizeof text, "%s: %s global fm offset", ch->name, what);
  if (OK(mlsl_activation_get_global_fm_offset(act, &v))) EXPECT_EQ(text, v, fm_off);
  snprintf(text, sizeof text, "%s: %s fm size", ch->name, what);
  if (OK(mlsl_activation_get_fm_size(act, &v))) EXPECT_EQ(text, v, FM);
  snprintf(text, sizeof text, "%s: %s data type", ch->name, what);
  if (OK(mlsl_activation_get_data_type(act, &dt))) EXPECT_EQ(text, dt, DT_FLOAT);
}

static void check_param_getters(const chain_t* ch, layer_t* ly, int idx) {
  size_t v = 0;
  int flag = -1;
  mlsl_data_type dt = DT_BYTE;
  size_t local = ly->kernels / (size_t)ch->m;
  char text[160];
  ly->global_off = local * ch->mi;
  if (ly->du) {
    ly->owned = (local + (size_t)ch->d - 1) / (size_t)ch->d;
    ly->local = ly->owned * (size_t)ch->d;
    ly->owned_off = ly->owned * ch->di;
  } else {
    ly->owned = ly->local = local;
    ly->owned_off = 0;
  }
  snprintf(text, sizeof text, "%s: op%d global kernel count", ch->name, idx);
  if (OK(mlsl_parameter_set_get_global_kernel_count(ly->ps, &v))) EXPECT_EQ(text, v, ly->kernels);
  snprintf(text, sizeof text, "%s: op%d global kernel offset", ch->name, idx);
  if (OK(mlsl_parameter_set_get_global_kernel_offset(ly->ps, &v)))
    EXPECT_EQ(text, v, ly->global_off);
  snprintf(text, sizeof text, "%s: op%d local kernel count", ch->name, idx);
  if (OK(mlsl_parameter_set_get_local_kernel_count(ly->ps, &v))) EXPECT_EQ(text, v, ly->local);
  snprintf(text, sizeof text, "%s: op%d owned kernel count", ch->name, idx);
  if (OK(mlsl_parameter_set_get_owned_kernel_count(ly->ps, &v))) EXPECT_EQ(text, v, ly->owned);
  snprintf(text, sizeof text, "%s: op%d owned kernel offset", ch->name, idx);
  if (OK(mlsl_parameter_set_get_owned_kernel_offset(ly->ps, &v))) EXPECT_EQ(text, v, ly->owned_off);
  snprintf(text, sizeof text, "%s: op%d kernel size", ch->name, idx);
  if (OK(mlsl_parameter_set_get_kernel_size(ly->ps, &v))) EXPECT_EQ(text, v, ly->ks);
  snprintf(text, sizeof text, "%s: op%d parameter data type", ch->name, idx);
  if (OK(mlsl_parameter_set_get_data_type(ly->ps, &dt))) EXPECT_EQ(text, dt, ly->pdt);
  snprintf(text, sizeof text, "%s: op%d is_distributed_update", ch->name, idx);
  if (OK(mlsl_parameter_set_is_distributed_update(ly->ps, &flag))) EXPECT_EQ(text, flag, ly->du);
}

/* Registers, links and commits the two operations. */
static int chain_build(chain_t* ch) {
  mlsl_operation_reg_info reg[2] = {0, 0};
  size_t idx = 99, v = 0;
  int i, flag = -1;
  mlsl_phase_type phase = PT_TEST;
  const char* names[2] = {"c_check_cc0", "c_check_cc1"};
  if (!OK(mlsl_environment_create_session(env, PT_TRAIN, &ch->session))) return 0;
  OK(mlsl_session_set_global_minibatch_size(ch->session, ch->gmb));
  if (OK(mlsl_session_get_global_minibatch_size(ch->session, &v)))
    EXPECT_EQ("session global minibatch", v, ch->gmb);
  if (OK(mlsl_session_get_phase_type(ch->session, &phase)))
    EXPECT_EQ("session phase", phase, PT_TRAIN);
  for (i = 0; i < 2; i++) {
    layer_t* ly = &ch->layer[i];
    if (!OK(mlsl_session_create_operation_reg_info(ch->session, OT_CC, &reg[i]))) return 0;
    OK(mlsl_operation_reg_info_set_name(reg[i], names[i]));
    OK(mlsl_operation_reg_info_add_input(reg[i], i == 0 ? FIN0 : F1, FM, DT_FLOAT));
    OK(mlsl_operation_reg_info_add_output(reg[i], i == 0 ? F0 : F2, FM, DT_FLOAT));
    ly->kernels = i == 0 ? K0 : K1;
    ly->ks = i == 0 ? KS0 : KS1;
    ly->pdt = i == 0 ? DT_FLOAT : DT_DOUBLE;
    ly->du = ch->du;
    if (i == 0) {
      OK(mlsl_operation_reg_info_add_parameter_set(reg[i], ly->kernels, ly->ks, ly->pdt, ly->du));
      OK(mlsl_operation_reg_info_validate(reg[i], ch->dist));
      OK(mlsl_session_add_operation_with_distribution(ch->session, reg[i], ch->dist, &idx));
    } else {
      OK(mlsl_operation_reg_info_add_parameter_set_with_compress(reg[i], ly->kernels, ly->ks,
                                                                 ly->pdt, ly->du, CT_NONE));
      OK(mlsl_operation_reg_info_validate(reg[i], 0));
      OK(mlsl_session_add_operation(ch->session, reg[i], &idx));
    }
    EXPECT_EQ("operation index", idx, i);
    OK(mlsl_session_delete_operation_reg_info(ch->session, reg[i]));
    if (!OK(mlsl_session_get_operation(ch->session, (size_t)i, &ly->op))) return 0;
  }
  /* op1 got no distribution at AddOperation. */
  OK(mlsl_operation_set_distribution(ch->layer[1].op, ch->dist));
  if (OK(mlsl_session_get_operation_count(ch->session, &v))) EXPECT_EQ("operation count", v, 2);
  if (ch->link_next)
    OK(mlsl_operation_set_next(ch->layer[0].op, ch->layer[1].op, 0, 0));
  else
    OK(mlsl_operation_set_prev(ch->layer[1].op, ch->layer[0].op, 0, 0));

  for (i = 0; i < 2; i++) {
    layer_t* ly = &ch->layer[i];
    mlsl_distribution d = 0;
    mlsl_session s = 0;
    mlsl_op_type type = OT_EVAL;
    const char* name = NULL;
    if (OK(mlsl_operation_get_distribution(ly->op, &d))) EXPECT_EQ("op distribution", d, ch->dist);
    if (OK(mlsl_operation_get_session(ly->op, &s))) EXPECT_EQ("op session", s, ch->session);
    if (OK(mlsl_operation_get_op_type(ly->op, &type))) EXPECT_EQ("op type", type, OT_CC);
    if (OK(mlsl_operation_get_name(ly->op, &name)))
      EXPECT(name != NULL && strcmp(name, names[i]) == 0, "op%d name: got \"%s\", expected \"%s\"",
             i, name ? name : "(null)", names[i]);
    if (OK(mlsl_operation_get_global_minibatch_size(ly->op, &v)))
      EXPECT_EQ("op global minibatch", v, ch->gmb);
    if (OK(mlsl_operation_get_local_minibatch_size(ly->op, &v)))
      EXPECT_EQ("op local minibatch", v, ch->mb);
    if (OK(mlsl_operation_get_global_minibatch_offset(ly->op, &v)))
      EXPECT_EQ("op minibatch offset", v, ch->mb_off);
    if (OK(mlsl_operation_get_input_count(ly->op, &v))) EXPECT_EQ("op input count", v, 1);
    if (OK(mlsl_operation_get_output_count(ly->op, &v))) EXPECT_EQ("op output count", v, 1);
    if (OK(mlsl_operation_has_parameter_sets(ly->op, &flag))) EXPECT_EQ("op has params", flag, 1);
    if (OK(mlsl_operation_get_parameter_set_count(ly->op, &v))) EXPECT_EQ("op param count", v, 1);
    if (!OK(mlsl_operation_get_input(ly->op, 0, &ly->in)) ||
        !OK(mlsl_operation_get_output(ly->op, 0, &ly->out)) ||
        !OK(mlsl_operation_get_parameter_set(ly->op, 0, &ly->ps)))
      return 0;
  }
  if (!OK(mlsl_session_commit(ch->session))) return 0;

  /* A CC output holds every feature map (partial sums); an input holds its model slice. */
  check_activation_getters(ch, ch->layer[0].in, "op0 input", FIN0, FIN0 / ch->m,
                           FIN0 / ch->m * ch->mi);
  check_activation_getters(ch, ch->layer[0].out, "op0 output", F0, F0, 0);
  check_activation_getters(ch, ch->layer[1].in, "op1 input", F1, F1 / ch->m, F1 / ch->m * ch->mi);
  check_activation_getters(ch, ch->layer[1].out, "op1 output", F2, F2, 0);
  for (i = 0; i < 2; i++) {
    layer_t* ly = &ch->layer[i];
    size_t bytes;
    check_param_getters(ch, ly, i);
    bytes = ly->local * ly->ks * dt_size(ly->pdt);
    ly->grad = buf_new(ch->lib, bytes);
    ly->params = buf_new(ch->lib, bytes);
  }
  return 1;
}

/* The comm buffer a side sends from: the library's, or one of the same size from malloc. */
static float* send_buffer(const chain_t* ch, mlsl_activation act, void** owned) {
  void* lib_buf = NULL;
  size_t size = 0;
  *owned = NULL;
  if (!OK(mlsl_activation_get_comm_buf(act, &lib_buf)) ||
      !OK(mlsl_activation_get_comm_buf_size(act, &size)))
    return NULL;
  if (size == 0) return NULL; /* no exchange on this side */
  if (ch->lib) {
    EXPECT(lib_buf != NULL, "%s: get_comm_buf is NULL with a comm buffer of %zu bytes", ch->name,
           size);
    return (float*)lib_buf;
  }
  *owned = malloc(size);
  return (float*)*owned;
}

static void chain_forward(chain_t* ch, int it, float* out0, float* in1) {
  size_t l_in1 = F1 / ch->m, mb, fm, s, nb = 99, n, i;
  void *ret = (void*)1, *owned = NULL;
  float* buf;
  double* ref;
  char text[160];
  int k;

  /* op0's input has no producer: nothing to wait for, nothing to unpack. */
  if (OK(mlsl_activation_wait_comm(ch->layer[0].in, &ret)))
    EXPECT(ret == NULL, "%s: op0 input wait_comm returned %p, expected NULL", ch->name, ret);
  if (OK(mlsl_activation_get_unpack_block_count(ch->layer[0].in, &nb)))
    EXPECT_EQ("op0 input unpack blocks", nb, 0);

  for (k = 0; k < 2; k++) {
    layer_t* ly = &ch->layer[k];
    size_t e, elems = ly->local * ly->ks;
    int exchanged = ly->du && ch->d > 1 && it > 0;
    ret = (void*)1;
    if (!OK(mlsl_parameter_set_wait_increment_comm(ly->ps, &ret))) continue;
    snprintf(text, sizeof text, "%s it %d: op%d wait_increment_comm", ch->name, it, k);
    EXPECT(ret == (exchanged ? ly->params : NULL), "%s returned %p, expected %p", text, ret,
           exchanged ? ly->params : NULL);
    if (exchanged) {
      ref = ref_new(elems);
      for (e = 0; e < elems; e++) ref[e] = param_val(ly->global_off * ly->ks + e, it - 1);
      expect_elems(__LINE__, text, ly->params, ly->pdt, ref, elems);
      free(ref);
    }
  }

  /* op0 computes: model member m writes fwd_val * (m + 1) for every feature map. */
  for (mb = 0; mb < ch->mb; mb++)
    for (fm = 0; fm < F0; fm++)
      for (s = 0; s < FM; s++)
        out0[(mb * F0 + fm) * FM + s] = (float)fwd_val(ch->mb_off + mb, fm, s, it, ch->mi);
  buf = send_buffer(ch, ch->layer[0].out, &owned);
  if (buf != NULL) {
    move_blocks(ch, ch->layer[0].out, 1, out0, F0, buf);
    OK(mlsl_activation_start_comm(ch->layer[0].out, buf));
  }

  /* op1 unpacks its input: the sum over the model group of its slice of op0's outputs. */
  n = ch->mb * l_in1 * FM;
  for (i = 0; i < n; i++) in1[i] = -1;
  ret = NULL;
  if (OK(mlsl_activation_wait_comm(ch->layer[1].in, &ret))) {
    if (ret != NULL) {
      move_blocks(ch, ch->layer[1].in, 0, in1, l_in1, (float*)ret);
    } else {
      /* No exchange (one model part, one distribution): the program shares the tile. */
      EXPECT(ch->m == 1, "%s: op1 input wait_comm returned NULL with %d model parts", ch->name,
             ch->m);
      memcpy(in1, out0, n * sizeof(float));
    }
  }
  ref = ref_new(n);
  for (mb = 0; mb < ch->mb; mb++) {
    for (fm = 0; fm < l_in1; fm++) {
      for (s = 0; s < FM; s++) {
        size_t m;
        double sum = 0;
        for (m = 0; m < (size_t)ch->m; m++)
          sum += fwd_val(ch->mb_off + mb, l_in1 * ch->mi + fm, s, it, m);
        ref[(mb * l_in1 + fm) * FM + s] = sum;
      }
    }
  }
  snprintf(text, sizeof text, "%s it %d: op1 input after forward", ch->name, it);
  expect_elems(__LINE__, text, in1, DT_FLOAT, ref, n);
  free(ref);
  free(owned);
}

static void chain_backward(chain_t* ch, int it, float* out0, float* in1) {
  size_t l_in1 = F1 / ch->m, mb, fm, s, n, i, e;
  void *ret = (void*)1, *owned = NULL;
  float* buf;
  double* ref;
  char text[160];
  int k;

  /* op1's output has no consumer. */
  if (OK(mlsl_activation_wait_comm(ch->layer[1].out, &ret)))
    EXPECT(ret == NULL, "%s: op1 output wait_comm returned %p, expected NULL", ch->name, ret);

  /* op1 sends the gradient of its input slice back. */
  for (mb = 0; mb < ch->mb; mb++)
    for (fm = 0; fm < l_in1; fm++)
      for (s = 0; s < FM; s++)
        in1[(mb * l_in1 + fm) * FM + s] =
            (float)bwd_val(ch->mb_off + mb, l_in1 * ch->mi + fm, s, it);
  buf = send_buffer(ch, ch->layer[1].in, &owned);
  if (buf != NULL) {
    move_blocks(ch, ch->layer[1].in, 1, in1, l_in1, buf);
    OK(mlsl_activation_start_comm(ch->layer[1].in, buf));
  }

  for (k = 1; k >= 0; k--) {
    layer_t* ly = &ch->layer[k];
    size_t elems = ly->local * ly->ks;
    for (e = 0; e < elems; e++)
      put_at(ly->grad, ly->pdt, e, grad_val(ly->global_off * ly->ks + e, ch->di));
    OK(mlsl_parameter_set_start_gradient_comm(ly->ps, ly->grad));
    if (k == 1) {
      /* op0 receives the gradient of its whole output: every model member's slice. */
      n = ch->mb * F0 * FM;
      for (i = 0; i < n; i++) out0[i] = -1;
      ret = NULL;
      if (OK(mlsl_activation_wait_comm(ch->layer[0].out, &ret))) {
        if (ret != NULL)
          move_blocks(ch, ch->layer[0].out, 0, out0, F0, (float*)ret);
        else
          memcpy(out0, in1, n * sizeof(float));
      }
      ref = ref_new(n);
      for (mb = 0; mb < ch->mb; mb++)
        for (fm = 0; fm < F0; fm++)
          for (s = 0; s < FM; s++)
            ref[(mb * F0 + fm) * FM + s] = bwd_val(ch->mb_off + mb, fm, s, it);
      snprintf(text, sizeof text, "%s it %d: op0 output gradient after backward", ch->name, it);
      expect_elems(__LINE__, text, out0, DT_FLOAT, ref, n);
      free(ref);
    }
  }
  free(owned);
}

static void chain_update(chain_t* ch, int it) {
  int k;
  char text[160];
  for (k = 0; k < 2; k++) {
    layer_t* ly = &ch->layer[k];
    size_t e, elems, start;
    void* ret = (void*)1;
    double* ref;
    snprintf(text, sizeof text, "%s it %d: op%d gradient", ch->name, it, k);
    void* tested = NULL;
    if (ch->use_test) {
      /* One check for the whole loop: the number of polls differs between ranks. */
      int done = 0;
      for (;;) {
        done = -1;
        if (mlsl_parameter_set_test_gradient_comm(ly->ps, &done, &ret) != CMLSL_SUCCESS) {
          EXPECT(0, "%s: mlsl_parameter_set_test_gradient_comm failed", text);
          break;
        }
        if (done != 0) break;
      }
      EXPECT_EQ("test_gradient_comm: is_completed as a whole int", done, 1);
      tested = ret;
    } else {
      OK(mlsl_parameter_set_wait_gradient_comm(ly->ps, &ret));
    }
    /* The reduced gradients: in place without distributed update, the owned part in a
     * library buffer with it, nothing when the data group is one process. */
    if (ch->d == 1) {
      EXPECT(ret == NULL, "%s: got %p, expected NULL (data group of one)", text, ret);
    } else if (!ly->du) {
      EXPECT(ret == ly->grad, "%s: got %p, expected the buffer passed (%p)", text, ret, ly->grad);
    } else {
      EXPECT(ret != NULL && ret != ly->grad, "%s: got %p, expected the library's owned-part buffer",
             text, ret);
    }
    if (ret != NULL) {
      elems = (ly->du ? ly->owned : ly->local) * ly->ks;
      start = ly->du ? ly->owned_off * ly->ks : 0;
      ref = ref_new(elems);
      for (e = 0; e < elems; e++) {
        size_t d;
        ref[e] = 0;
        for (d = 0; d < (size_t)ch->d; d++)
          ref[e] += grad_val(ly->global_off * ly->ks + start + e, d);
      }
      expect_elems(__LINE__, text, ret, ly->pdt, ref, elems);
      free(ref);
    }
    /* Waited (or tested to completion and then waited) already: a second wait returns NULL. */
    if (ch->use_test && OK(mlsl_parameter_set_wait_gradient_comm(ly->ps, &ret)))
      EXPECT(ret == tested,
             "%s: wait_gradient_comm after a completing test returned %p, expected "
             "%p",
             text, ret, tested);
    ret = (void*)1;
    if (OK(mlsl_parameter_set_wait_gradient_comm(ly->ps, &ret)))
      EXPECT(ret == NULL, "%s: second wait_gradient_comm returned %p, expected NULL", text, ret);

    /* The update: this process writes its owned kernels; the increment spreads them. */
    elems = ly->local * ly->ks;
    for (e = 0; e < elems; e++) put_at(ly->params, ly->pdt, e, -5);
    for (e = ly->owned_off * ly->ks; e < (ly->owned_off + ly->owned) * ly->ks; e++)
      put_at(ly->params, ly->pdt, e, param_val(ly->global_off * ly->ks + e, it));
    OK(mlsl_parameter_set_start_increment_comm(ly->ps, ly->params));
  }
}

static void chain_finish(chain_t* ch) {
  int k;
  for (k = 0; k < 2; k++) {
    layer_t* ly = &ch->layer[k];
    int exchanged = ly->du && ch->d > 1;
    void* ret = (void*)1;
    char text[160];
    snprintf(text, sizeof text, "%s: op%d final wait_increment_comm", ch->name, k);
    if (OK(mlsl_parameter_set_wait_increment_comm(ly->ps, &ret))) {
      EXPECT(ret == (exchanged ? ly->params : NULL), "%s returned %p, expected %p", text, ret,
             exchanged ? ly->params : NULL);
      if (exchanged) {
        size_t e, elems = ly->local * ly->ks;
        double* ref = ref_new(elems);
        for (e = 0; e < elems; e++) ref[e] = param_val(ly->global_off * ly->ks + e, ITERS - 1);
        expect_elems(__LINE__, text, ly->params, ly->pdt, ref, elems);
        free(ref);
      }
    }
    ret = (void*)1;
    if (OK(mlsl_parameter_set_wait_increment_comm(ly->ps, &ret)))
      EXPECT(ret == NULL, "%s (twice) returned %p, expected NULL", text, ret);
  }
}

/* Statistics: with MLSL_STATS=1 they count; otherwise every call is a successful no-op. */
static void check_statistics(chain_t* ch, mlsl_statistics stats, int phase) {
  int enabled = -1, started = -1;
  if (!OK(mlsl_statistics_is_enabled(stats, &enabled))) return;
  EXPECT(enabled == 0 || enabled == 1, "statistics is_enabled %d is not a whole 0/1 int", enabled);
  if (phase == 0) {
    OK(mlsl_statistics_start(stats));
    if (OK(mlsl_statistics_is_started(stats, &started)) && enabled)
      EXPECT_EQ("statistics started after start", started, 1);
    return;
  }
  OK(mlsl_statistics_stop(stats));
  if (OK(mlsl_statistics_is_started(stats, &started)))
    EXPECT_EQ("statistics started after stop", started, 0);
  {
    unsigned long long cycles = 0;
    size_t size = 0, op;
    for (op = 0; op < 2; op++) {
      OK(mlsl_statistics_get_isolation_comm_cycles(stats, op, &cycles));
      OK(mlsl_statistics_get_comm_size(stats, op, &size));
      if (!enabled) EXPECT_EQ("disabled statistics comm size", size, 0);
      OK(mlsl_statistics_get_comm_cycles(stats, op, &cycles));
      OK(mlsl_statistics_get_compute_cycles(stats, op, &cycles));
    }
    OK(mlsl_statistics_get_total_isolation_comm_cycles(stats, &cycles));
    OK(mlsl_statistics_get_total_comm_size(stats, &size));
    if (enabled && (ch->m > 1 || ch->d > 1))
      EXPECT(size > 0, "%s: statistics total comm size is 0 after exchanges", ch->name);
    if (!enabled) EXPECT_EQ("disabled statistics total comm size", size, 0);
    OK(mlsl_statistics_get_total_comm_cycles(stats, &cycles));
    OK(mlsl_statistics_get_total_compute_cycles(stats, &cycles));
  }
  OK(mlsl_statistics_print(stats));
  OK(mlsl_statistics_reset(stats));
}

void run_chain(mlsl_distribution dist, int d, int m, int du, int lib) {
  chain_t ch;
  mlsl_statistics stats = 0;
  float *out0, *in1;
  int it, k;
  size_t v = 99;
  memset(&ch, 0, sizeof ch);
  ch.du = du;
  ch.lib = lib;
  ch.use_test = lib == du; /* half the runs complete gradients with a test loop */
  ch.link_next = lib;      /* half link with set_next, half with set_prev */
  ch.d = d;
  ch.m = m;
  ch.dist = dist;
  ch.di = grid_group(rank, world, d, m, GT_DATA).k;
  ch.mi = grid_group(rank, world, d, m, GT_MODEL).k;
  ch.gmb = 2 * (size_t)d;
  ch.mb = ch.gmb / (size_t)d;
  ch.mb_off = ch.mb * ch.di;
  snprintf(ch.name, sizeof ch.name, "chain %dx%d du %d %s buffers%s", d, m, du,
           lib ? "library" : "user", ch.use_test ? " test" : "");
  if (!chain_build(&ch)) return;

  out0 = (float*)malloc(ch.mb * F0 * FM * sizeof(float));
  in1 = (float*)malloc(ch.mb * F1 * FM * sizeof(float));
  if (out0 == NULL || in1 == NULL) exit(1);
  if (OK(mlsl_session_get_stats(ch.session, &stats))) {
    if (ch.use_test) {
      /* Never started by the program: not complete and no buffer; complete when there is no
       * exchange at all. With statistics on, Commit's isolation runs started and waited the
       * exchange already, so "complete" (with no buffer) is right too. */
      int done = -1, enabled = 0;
      void* ret = (void*)1;
      OK(mlsl_statistics_is_enabled(stats, &enabled));
      if (OK(mlsl_parameter_set_test_gradient_comm(ch.layer[0].ps, &done, &ret))) {
        EXPECT(ret == NULL, "%s: test_gradient_comm before any start returned %p", ch.name, ret);
        if (enabled)
          EXPECT(done == 0 || done == 1, "%s: is_completed %d", ch.name, done);
        else
          EXPECT_EQ("test_gradient_comm before any start: completed", done, ch.d == 1 ? 1 : 0);
      }
    }
    check_statistics(&ch, stats, 0);
  }
  for (it = 0; it < ITERS; it++) {
    chain_forward(&ch, it, out0, in1);
    chain_backward(&ch, it, out0, in1);
    chain_update(&ch, it);
  }
  chain_finish(&ch);
  if (stats) check_statistics(&ch, stats, 1);

  for (k = 0; k < 2; k++) {
    buf_free(lib, ch.layer[k].grad);
    buf_free(lib, ch.layer[k].params);
  }
  free(out0);
  free(in1);
  OK(mlsl_session_remove_operations(ch.session));
  if (OK(mlsl_session_get_operation_count(ch.session, &v)))
    EXPECT_EQ("operation count after remove_operations", v, 0);
  OK(mlsl_environment_delete_session(env, ch.session));
  /* The session is gone: its handle is stale now. */
  REFUSED(mlsl_session_get_operation_count(ch.session, &v));
}
