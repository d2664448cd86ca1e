"""What `kiln package` asks of the worker: the package_info method
(package_info.py), every template's launch as shape expressions (launch_exprs.py,
shape_expr.py) and the verification data (verify_data.py)."""
