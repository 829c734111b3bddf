"""The prediction family (21_prediction, 22_recommend): features of a model computed without running
it, and the predictors and recommender built on them."""
