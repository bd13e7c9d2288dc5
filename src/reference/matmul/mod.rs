//! (CPU oracle for matmul: being written.)
