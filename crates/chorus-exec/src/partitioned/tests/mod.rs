mod alg2;
