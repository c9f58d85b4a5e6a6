/* The public op API of include/recap.h: the registry's info (recap_op_info, recap_op_attr_info)
 * checked against the contracts of a few ops by hand. Uses recap.h only, as an embedder would. */
#include <string.h>

#include "include/recap.h"
#include "tests/test_util.h"

static void test_every_op_is_listed_once_and_found_by_its_name(void) {
  size_t count = recap_op_count();
  CU_ASSERT_TRUE(count >= 30);
  for (size_t i = 0; i < count; i++) {
    recap_op_info op, found;
    CHECK_OK(recap_op_info_get(i, &op));
    CU_ASSERT_EQUAL(op.index, i);
    CU_ASSERT_PTR_NOT_NULL_FATAL(op.name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(op.input_names);
    CHECK_OK(recap_op_info_find(op.name, &found));
    CU_ASSERT_EQUAL(found.index, i);
    int named = 0;
    while (op.input_names[named]) named++;
    CU_ASSERT_TRUE(op.min_inputs <= op.max_inputs && op.max_inputs <= named);
    for (size_t a = 0; a < op.num_attrs; a++) {
      recap_op_attr_info attr;
      CHECK_OK(recap_op_attr_info_get(i, a, &attr));
      CU_ASSERT_PTR_NOT_NULL(attr.name);
      CU_ASSERT_TRUE(attr.default_text[0] != '\0');
    }
    CHECK_STATUS(recap_op_attr_info_get(i, op.num_attrs, &(recap_op_attr_info){0}),
                 RECAP_STATUS_INVALID_ARGUMENT);
  }
  CHECK_STATUS(recap_op_info_get(count, &(recap_op_info){0}), RECAP_STATUS_INVALID_ARGUMENT);
  CHECK_STATUS(recap_op_info_get(0, NULL), RECAP_STATUS_INVALID_ARGUMENT);
}

/* linear: x, weight, bias?, residual?; float dtypes; one activation attribute, none. */
static void test_linear_is_described_as_its_contract_says(void) {
  recap_op_info op;
  CHECK_OK(recap_op_info_find("linear", &op));
  CU_ASSERT_STRING_EQUAL(op.name, "linear");
  CU_ASSERT_PTR_NOT_NULL(strstr(op.summary, "weight"));
  CU_ASSERT_STRING_EQUAL(op.input_names[0], "x");
  CU_ASSERT_STRING_EQUAL(op.input_names[1], "weight");
  CU_ASSERT_STRING_EQUAL(op.input_names[2], "bias?");
  CU_ASSERT_STRING_EQUAL(op.input_names[3], "residual?");
  CU_ASSERT_PTR_NULL(op.input_names[4]);
  CU_ASSERT_EQUAL(op.min_inputs, 2);
  CU_ASSERT_EQUAL(op.max_inputs, 4);
  CU_ASSERT_EQUAL(op.num_outputs, 1);
  CU_ASSERT_EQUAL(op.dtype_mask,
                  (1u << RECAP_DTYPE_F32) | (1u << RECAP_DTYPE_F16) | (1u << RECAP_DTYPE_BF16));
  CU_ASSERT_EQUAL(op.in_place_input, -1);
  CU_ASSERT_FALSE(op.is_random);
  CU_ASSERT_EQUAL_FATAL(op.num_attrs, 1);
  recap_op_attr_info act;
  CHECK_OK(recap_op_attr_info_get(op.index, 0, &act));
  CU_ASSERT_STRING_EQUAL(act.name, "act");
  CU_ASSERT_EQUAL(act.kind, RECAP_OP_ATTR_ACTIVATION);
  CU_ASSERT_FALSE(act.required);
  CU_ASSERT_EQUAL(act.default_value, 0);
  CU_ASSERT_STRING_EQUAL(act.default_text, "none");
  CU_ASSERT_PTR_NOT_NULL(strstr(act.doc, "gelu_tanh"));
}

/* matmul's attributes: alpha 1, beta 0, trans_a and trans_b false. */
static void test_matmul_attributes_have_their_defaults(void) {
  recap_op_info op;
  CHECK_OK(recap_op_info_find("matmul", &op));
  CU_ASSERT_EQUAL_FATAL(op.num_attrs, 4);
  static const struct {
    const char *name;
    recap_op_attr_kind kind;
    double value;
    const char *text;
  } want[] = {{"alpha", RECAP_OP_ATTR_FLOAT, 1, "1"},
              {"beta", RECAP_OP_ATTR_FLOAT, 0, "0"},
              {"trans_a", RECAP_OP_ATTR_BOOL, 0, "false"},
              {"trans_b", RECAP_OP_ATTR_BOOL, 0, "false"}};
  for (size_t a = 0; a < 4; a++) {
    recap_op_attr_info attr;
    CHECK_OK(recap_op_attr_info_get(op.index, a, &attr));
    CU_ASSERT_STRING_EQUAL(attr.name, want[a].name);
    CU_ASSERT_EQUAL(attr.kind, want[a].kind);
    CU_ASSERT_FALSE(attr.required);
    CU_ASSERT_EQUAL(attr.default_value, want[a].value);
    CU_ASSERT_STRING_EQUAL(attr.default_text, want[a].text);
  }
}

/* An op without inputs that draws random numbers; an unknown name suggests a close one. */
static void test_random_ops_and_unknown_names(void) {
  recap_op_info op;
  CHECK_OK(recap_op_info_find("random_uniform", &op));
  CU_ASSERT_TRUE(op.is_random);
  CU_ASSERT_EQUAL(op.max_inputs, 0);
  CU_ASSERT_PTR_NULL(op.input_names[0]);
  CHECK_STATUS(recap_op_info_find("sofmax", &op), RECAP_STATUS_INVALID_ARGUMENT);
  CU_ASSERT_PTR_NOT_NULL(strstr(recap_last_error(), "softmax"));
  CHECK_STATUS(recap_op_info_find(NULL, &op), RECAP_STATUS_INVALID_ARGUMENT);
}

int main(void) {
  CU_pSuite s = test_add_suite("op_api/info", NULL, NULL);
  CU_ADD_TEST(s, test_every_op_is_listed_once_and_found_by_its_name);
  CU_ADD_TEST(s, test_linear_is_described_as_its_contract_says);
  CU_ADD_TEST(s, test_matmul_attributes_have_their_defaults);
  CU_ADD_TEST(s, test_random_ops_and_unknown_names);
  return test_run_all();
}
