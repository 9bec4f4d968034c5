/* tf_ext's release, shared by the C API headers (tf_ext/graph/c_api/c_gradients.h,
 * tf_ext/graph/c_api/c_gradient_session.h, tf_ext/train/c_trainer.h), the tools (tf_ext_train
 * --version) and the wheel (python/build_wheel.py reads its version from this file), so a
 * program compiled against the headers a wheel ships can check which release it has. */
#ifndef TF_EXT_VERSION_H_
#define TF_EXT_VERSION_H_

#define TF_EXT_VERSION_MAJOR 0
#define TF_EXT_VERSION_MINOR 1
#define TF_EXT_VERSION_PATCH 0
#define TF_EXT_VERSION_STRING "0.1.0"

/* One number that orders releases: (major * 10000) + (minor * 100) + patch. */
#define TF_EXT_VERSION_NUMBER \
  ((TF_EXT_VERSION_MAJOR * 10000) + (TF_EXT_VERSION_MINOR * 100) + TF_EXT_VERSION_PATCH)

#endif /* TF_EXT_VERSION_H_ */
